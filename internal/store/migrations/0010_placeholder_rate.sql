-- PLACEHOLDER on branch h/rate only: migration 0010 belongs to a branch
-- merged alongside this one. Delete this file when that branch's 0010 is
-- merged (two 0010 files fail every Open: "expected version ... next").
SELECT 1;
