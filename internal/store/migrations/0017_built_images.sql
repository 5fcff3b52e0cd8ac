-- 0018: the run defaults of images berth built (package build, the
-- image-build job): the Dockerfile's CMD, ENTRYPOINT, ENV, WORKDIR, USER
-- and first exposed port, used as a pulled image's config is when a
-- deployment names no start_command. One row per built image (same name
-- as its images row); gone with the image.
CREATE TABLE image_configs (
	name   TEXT NOT NULL PRIMARY KEY REFERENCES images (name) ON DELETE CASCADE,
	config TEXT NOT NULL  -- JSON: entrypoint, cmd, env, workdir, user, port
) STRICT;
