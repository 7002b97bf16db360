-- A small sample schema for the compose demo; `pgbridge demo` creates the same tables locally.
CREATE TABLE IF NOT EXISTS public.customers (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    email text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS public.orders (
    id bigint PRIMARY KEY,
    customer_id bigint NOT NULL REFERENCES public.customers (id),
    amount numeric(12, 2) NOT NULL,
    status text NOT NULL,
    placed_at timestamptz NOT NULL DEFAULT now()
);
