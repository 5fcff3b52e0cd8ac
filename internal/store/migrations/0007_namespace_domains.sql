-- 0007: the domains the operator assigns to a declared namespace (issue 9):
-- a JSON array of lowercase host names. A namespace-confined caller may
-- route only hosts under its namespace's domains, and no other namespace
-- may route hosts under them.

ALTER TABLE namespaces ADD COLUMN domains TEXT NOT NULL DEFAULT '[]';
