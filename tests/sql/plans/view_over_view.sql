-- a view over a view inlines the inner view's plan (per_product, defined in test_plans.py)
SELECT category, n FROM per_product p JOIN info i ON p.product = i.product WHERE n > 2
