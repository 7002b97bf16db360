-- Apicurio Registry keeps its schemas in this database of the same PostgreSQL.
CREATE DATABASE apicurio;
