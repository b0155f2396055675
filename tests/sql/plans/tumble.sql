-- TUMBLE: a Window node adds window_start/window_end
SELECT window_start, window_end, product, COUNT(*) AS c, SUM(n) AS s
FROM TUMBLE(clicks, ts, INTERVAL '10 minutes') GROUP BY window_start, window_end, product
