-- 0018: a placeholder for another branch's migration (the disks branch
-- takes 0019); the integrator drops it when the real 0018 lands.
SELECT 1;
