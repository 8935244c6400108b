-- A small shop: what it sells and what it sold. Loaded by start-db into the database "shop".

CREATE TABLE products (
    id         integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    category   text NOT NULL,
    unit_price numeric(8, 2) NOT NULL CHECK (unit_price > 0)
);

-- One row per product and month: the units sold that month (sold_on is the month's first day).
CREATE TABLE sales (
    product_id integer NOT NULL REFERENCES products (id),
    sold_on    date NOT NULL CHECK (extract(day FROM sold_on) = 1),
    units      integer NOT NULL CHECK (units >= 0),
    PRIMARY KEY (product_id, sold_on)
);

COMMENT ON TABLE sales IS 'Units sold per product and month; sold_on is the first day of the month.';
