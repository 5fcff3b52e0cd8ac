-- 0017: what a deployment's artifacts resolved to on their last pull: one
-- row per vm.mounts entry (path its guest path; package mountpull) and
-- one for the deployment's artifact section (path ''; package
-- artifactpull). digest is the blob ref named (hex); tree the host
-- directory it was unpacked into (<data>/trees/sha256/<digest>[-strip<N>]),
-- or for a vm artifact the image it was imported as; store, ref and
-- strip_components are what it was pulled with, so that an edit that
-- changes any of them is a pull not done yet. Gone with the deployment.
CREATE TABLE pulls (
	deployment       TEXT    NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
	path             TEXT    NOT NULL,
	store            TEXT    NOT NULL,
	ref              TEXT    NOT NULL,
	strip_components INTEGER NOT NULL CHECK (strip_components >= 0),
	digest           TEXT    NOT NULL,
	tree             TEXT    NOT NULL,
	pulled_at        TEXT    NOT NULL,
	PRIMARY KEY (deployment, path)
) STRICT;
