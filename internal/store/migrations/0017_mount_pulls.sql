-- 0017: what each guest mount of a vm deployment resolved to on its last
-- mount pull (package mountpull): the digest its ref named, the tree on
-- this host it was unpacked into (<data>/trees/sha256/<digest>[-strip<N>])
-- and the store, ref and strip_components it was pulled with, so that an
-- edit that changes any of them is a mount not pulled yet. One row per
-- mount path, gone with the deployment.
CREATE TABLE mount_pulls (
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
