-- Sales of 2026, month by month. The winter goods lead the year; the solar lantern leads the third quarter
-- (July to September) by a wide margin, so "which product sold most in Q3?" has one clear answer.

INSERT INTO products (name, category, unit_price) VALUES
    ('Solar lantern',     'outdoor',  24.90),
    ('Wool scarf',        'clothing', 39.00),
    ('Espresso grinder',  'kitchen',  89.50),
    ('Rain jacket',       'clothing', 119.00),
    ('Picnic blanket',    'outdoor',  34.00),
    ('Hot water bottle',  'home',     14.50);

-- Each array holds one product's units for January to December.
INSERT INTO sales (product_id, sold_on, units)
SELECT p.id, make_date(2026, m.month::integer, 1), m.units
FROM (VALUES
    ('Solar lantern',    ARRAY[ 12,  15,  30,  64, 118, 205, 388, 421, 296,  70,  22,  14]),
    ('Wool scarf',       ARRAY[410, 365, 220,  90,  30,  12,   8,  10,  45, 180, 372, 505]),
    ('Espresso grinder', ARRAY[ 95,  88, 102,  97,  91,  86,  84,  90,  99, 104, 140, 230]),
    ('Rain jacket',      ARRAY[ 60,  72, 150, 210, 160,  80,  40,  55, 170, 240, 190,  75]),
    ('Picnic blanket',   ARRAY[  5,   8,  20,  66, 150, 240, 260, 230, 110,  30,   9,   6]),
    ('Hot water bottle', ARRAY[310, 280, 150,  60,  20,   8,   5,   6,  25, 120, 260, 390])
) AS s(name, monthly)
JOIN products p ON p.name = s.name
CROSS JOIN LATERAL unnest(s.monthly) WITH ORDINALITY AS m(units, month);
