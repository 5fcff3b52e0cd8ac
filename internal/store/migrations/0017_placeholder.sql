-- 0017: placeholder for the migration another branch holds (0017 is
-- taken); the integrator drops this file when merging it.
SELECT 1;
