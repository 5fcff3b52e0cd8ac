-- 0015: images pulled from OCI registries (package image) and the
-- registry credentials of namespaces.
--
-- pulled_images: one row per reference whose image is in images (same
-- name); the tree there is flattened from the layers listed, kept under
-- <data-dir>/images/layers/sha256/<diff id>/.
CREATE TABLE pulled_images (
	name            TEXT NOT NULL PRIMARY KEY REFERENCES images (name) ON DELETE CASCADE,
	manifest_digest TEXT NOT NULL,  -- what the reference resolved to: an index or a manifest
	layers          TEXT NOT NULL,  -- JSON array of diff ids, bottom first
	config          TEXT NOT NULL   -- JSON: entrypoint, cmd, env, workdir, user, port
) STRICT;

-- The namespaces that resolved a pulled reference with their own
-- credentials; only they (and the operator) may start replicas from it,
-- so a private image pulled by A is not B's because it is cached.
CREATE TABLE pulled_image_namespaces (
	name      TEXT NOT NULL REFERENCES pulled_images (name) ON DELETE CASCADE,
	namespace TEXT NOT NULL,
	PRIMARY KEY (name, namespace)
) STRICT;

-- registry_credentials: which secret of a namespace holds its credentials
-- for a registry host (like a Kubernetes image pull secret). The secret's
-- keys are username/password or a docker config.json.
CREATE TABLE registry_credentials (
	namespace TEXT NOT NULL,
	host      TEXT NOT NULL,       -- e.g. ghcr.io, registry.local:5000
	secret    TEXT NOT NULL,       -- a secret id in that namespace
	PRIMARY KEY (namespace, host)
) STRICT;
