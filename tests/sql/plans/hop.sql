-- HOP: one row per window a row falls in
SELECT window_start, MAX(n) AS hi FROM HOP(clicks, ts, INTERVAL '5 minutes', INTERVAL '15 minutes')
GROUP BY window_start
