-- Rows belong to their agent, not to the shard count they were registered under, and an agent has one
-- consumer at a time (DESIGN §10, "Scheduled rows"; §11, buckets).
--
-- shard_id gives way to two columns computed from the action: bucket, the agent's bucket
-- (fnv1a64(agent key) mod 16384, oplog.AgentID.Bucket), which the claim selects by, so that a change of
-- the shard count strands no row; and subject, the agent's key, of which at most one row is leased at a
-- time. Existing rows are backfilled here. A row whose action is not JSON naming an archive_oplog
-- agent gets bucket 0 and subject '': it stays the error it was for the claim that reaches it.

-- The bucket needs only the hash's low 14 bits, and those depend on nothing above them: with
-- h mod 2^14 starting at the offset basis mod 2^14 (8997) and each step h = ((h xor byte) * prime)
-- mod 2^14, the prime mod 2^14 being 435, the result is fnv1a64(key) mod 16384 in integer arithmetic.
CREATE FUNCTION {{schema}}.strata_migration_0002_bucket(key text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    h integer := 8997;
    b bytea := pg_catalog.convert_to(key, 'UTF8');
BEGIN
    FOR i IN 0 .. pg_catalog.length(b) - 1 LOOP
        h := ((h # pg_catalog.get_byte(b, i)) * 435) & 16383;
    END LOOP;
    RETURN h;
END
$$;

CREATE FUNCTION {{schema}}.strata_migration_0002_subject(action text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    j jsonb;
BEGIN
    j := action::jsonb;
    IF pg_catalog.jsonb_typeof(j) <> 'object' OR j->>'kind' IS DISTINCT FROM 'archive_oplog'
        OR pg_catalog.jsonb_typeof(j->'component') IS DISTINCT FROM 'string'
        OR pg_catalog.jsonb_typeof(j->'name') IS DISTINCT FROM 'string' THEN
        RETURN NULL;
    END IF;
    RETURN (j->>'component') || ':' || (j->>'name');
EXCEPTION WHEN OTHERS THEN
    RETURN NULL; -- not JSON
END
$$;

ALTER TABLE {{schema}}.scheduled_actions
    ADD COLUMN bucket integer,
    ADD COLUMN subject text COLLATE "C";

UPDATE {{schema}}.scheduled_actions SET subject = {{schema}}.strata_migration_0002_subject(action);
UPDATE {{schema}}.scheduled_actions
    SET bucket = COALESCE({{schema}}.strata_migration_0002_bucket(subject), 0), subject = COALESCE(subject, '');

DROP FUNCTION {{schema}}.strata_migration_0002_bucket(text);
DROP FUNCTION {{schema}}.strata_migration_0002_subject(text);

ALTER TABLE {{schema}}.scheduled_actions
    ALTER COLUMN bucket SET NOT NULL,
    ALTER COLUMN subject SET NOT NULL,
    ADD CONSTRAINT scheduled_actions_bucket_range CHECK (bucket BETWEEN 0 AND 16383);

DROP INDEX {{schema}}.scheduled_actions_claim;
ALTER TABLE {{schema}}.scheduled_actions DROP COLUMN shard_id;

-- One consumer per subject on what is stored already: of an agent's leased rows only the one leased
-- longest keeps its lease (the others' holders lose it at their next renewal or acknowledgement, and
-- the rows run again); of pending, unleased duplicates of one action only the one that would run
-- latest stays, as a registration that replaces it would leave (schedule.Replaces).
UPDATE {{schema}}.scheduled_actions AS r SET lease_owner = NULL, lease_until_ms = NULL
WHERE r.lease_owner IS NOT NULL AND EXISTS (
    SELECT 1 FROM {{schema}}.scheduled_actions AS o
    WHERE o.subject = r.subject AND o.lease_owner IS NOT NULL AND o.schedule_id <> r.schedule_id
      AND (o.lease_until_ms, -o.schedule_id) > (r.lease_until_ms, -r.schedule_id));

DELETE FROM {{schema}}.scheduled_actions AS r
WHERE r.lease_owner IS NULL AND NOT r.failed AND EXISTS (
    SELECT 1 FROM {{schema}}.scheduled_actions AS o
    WHERE o.subject = r.subject AND o.action = r.action AND o.lease_owner IS NULL AND NOT o.failed
      AND o.schedule_id <> r.schedule_id
      AND (GREATEST(o.due_at_ms, o.available_at_ms), -o.schedule_id) > (GREATEST(r.due_at_ms, r.available_at_ms), -r.schedule_id));

-- Serves the claim: a range on the bucket, due_at_ms as range and order; failed rows are left out.
CREATE INDEX scheduled_actions_claim ON {{schema}}.scheduled_actions (bucket, due_at_ms, available_at_ms)
    WHERE NOT failed;

-- Serves Register's lookup of a pending row of the same action and the claim's check of a subject.
CREATE INDEX scheduled_actions_subject ON {{schema}}.scheduled_actions (subject);

-- At most one leased row per subject, expired leases included (a claim takes an expired lease over on
-- the same row). The claim keeps to it by serializing per subject (an advisory lock); this index makes
-- any breach an error instead of two consumers.
CREATE UNIQUE INDEX scheduled_actions_one_lease ON {{schema}}.scheduled_actions (subject)
    WHERE lease_owner IS NOT NULL;
