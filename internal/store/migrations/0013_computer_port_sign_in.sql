-- 0013: an exposed port may admit browsers that sign in with one of its
-- Computer's namespace's auth providers (by name; '' for none).
ALTER TABLE computer_ports ADD COLUMN sign_in TEXT NOT NULL DEFAULT '';
