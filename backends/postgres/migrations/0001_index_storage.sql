-- The index storage table. {{schema}} is replaced with the quoted schema name: every statement names
-- its schema, since the connections may run with an empty search_path.
--
-- key and namespace collate "C" so that ORDER BY and range bounds compare bytes, whatever the
-- database's default collation: ScanStable's keyset paging and its [prefix, next(prefix)) bounds rely
-- on byte order. The primary key is the only index: it serves the per-index lookups (namespace, key,
-- id range) and the key walks (namespace, key range).
CREATE TABLE {{schema}}.index_storage (
    namespace text COLLATE "C" NOT NULL,
    key       text COLLATE "C" NOT NULL,
    id        bigint NOT NULL CHECK (id > 0),
    value     bytea NOT NULL,
    PRIMARY KEY (namespace, key, id)
);
