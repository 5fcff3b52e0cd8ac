-- 0023: compiled-in plugins (package plugin). plugins is the operator's
-- fleet-level record of a plugin: its switch and its config (a JSON
-- document its schema accepted), kept while disabled. A plugin never
-- written has no row (it is disabled with config {}).
CREATE TABLE plugins (
	id         TEXT NOT NULL PRIMARY KEY,
	enabled    INTEGER NOT NULL,
	config     TEXT NOT NULL,   -- JSON
	updated_at INTEGER NOT NULL -- Unix seconds
) STRICT;

-- One namespace's install of a per-namespace plugin. installed_by is
-- `token:<id>`, or '' for the operator (and for the installs enabling a
-- plugin makes in every namespace).
CREATE TABLE plugin_installs (
	plugin       TEXT NOT NULL,
	namespace    TEXT NOT NULL,
	installed_at INTEGER NOT NULL, -- Unix seconds
	installed_by TEXT NOT NULL DEFAULT '',
	config       TEXT NOT NULL,    -- JSON
	PRIMARY KEY (plugin, namespace)
) STRICT;
