-- 0018: a placeholder, so that 0020 (workspaces) applies in order on this
-- branch; the integrator drops it for the branch whose 0018 lands.
SELECT 1;
