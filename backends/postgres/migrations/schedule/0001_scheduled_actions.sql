-- The scheduled rows of oplog/schedule. {{schema}} is replaced with the quoted schema name: every
-- statement names its schema, since the connections may run with an empty search_path.
--
-- Times are Unix milliseconds. lease_owner and lease_until_ms are NULL while nobody holds the row (never
-- claimed, or released); an owner is never empty, so "" can mean nobody when a row is read back.
CREATE TABLE {{schema}}.scheduled_actions (
    schedule_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    due_at_ms       bigint  NOT NULL,
    available_at_ms bigint  NOT NULL,
    shard_id        integer NOT NULL,
    action          text    NOT NULL,
    lease_owner     text CHECK (lease_owner <> ''),
    lease_until_ms  bigint,
    attempt_count   integer NOT NULL DEFAULT 0,
    failed          boolean NOT NULL DEFAULT false
);

-- Serves the claim: an equality on the shard, a range on due_at_ms that is also the order of the
-- claim, and available_at_ms checked in the index rather than the heap. Failed rows are never claimed
-- again, so they are left out and cost the claim nothing however many accumulate.
CREATE INDEX scheduled_actions_claim ON {{schema}}.scheduled_actions (shard_id, due_at_ms, available_at_ms)
    WHERE NOT failed;
