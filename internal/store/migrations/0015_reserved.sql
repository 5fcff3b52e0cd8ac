-- 0015: a placeholder holding this version's place for another branch
-- (h/oci's 0015_registry_pulls.sql), so that 0017 applies here; whoever
-- merges both deletes this file.
SELECT 1;
