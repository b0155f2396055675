-- SELECT DISTINCT: an aggregation without calls
SELECT DISTINCT "user", length / 10 AS bucket FROM visit
