-- a join whose ON has no equality runs as a cross join with a filter
SELECT a.product, b.product AS other FROM visit a JOIN visit b ON a.length < b.length
