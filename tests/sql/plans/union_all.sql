-- UNION ALL: the sum of the changelogs, the right side re-projected to the left's names
SELECT product, length FROM visit WHERE length > 50
UNION ALL SELECT product, 0 FROM info WHERE category IS NOT NULL
