-- an aggregate over a join whose arguments are all of one side: that side pre-aggregated by its
-- join key (how a view plans it: sql/planner/eager.py)
SELECT i.category, COUNT(*) AS n, SUM(v.length) AS total, MAX(v.length) AS longest
FROM visit v JOIN info i ON v.product = i.product
GROUP BY i.category
