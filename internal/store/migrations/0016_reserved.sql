-- 0016: a placeholder holding this version's place for another branch,
-- so that 0017 applies here; whoever merges that branch deletes this file.
SELECT 1;
