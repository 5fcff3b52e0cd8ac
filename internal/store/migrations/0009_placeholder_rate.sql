-- PLACEHOLDER on branch h/rate only: migration 0009 belongs to a branch
-- merged alongside this one. Delete this file when that branch's 0009 is
-- merged (two 0009 files fail every Open: "expected version ... next").
SELECT 1;
