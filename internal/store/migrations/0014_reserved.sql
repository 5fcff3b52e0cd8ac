-- 0014: reserved. Another branch adds the real 0014; this placeholder only
-- keeps versions contiguous (Open refuses gaps) until that one is merged,
-- when this file is dropped in favour of it.
SELECT 1;
