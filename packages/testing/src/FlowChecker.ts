/**
 * An overshoot checker for flow limits (`FlowControl`): a trigger on the outbox that, after
 * every claim of a limited topic, counts what is in flight for the topic and for the group of
 * the claimed message and records every count above its limit. The claim of a limited topic
 * runs alone (it holds the topic's limit row), so the count the trigger takes inside it is
 * exact: no other claim of the topic can commit before it does. Tests and the chaos suite
 * install it, run their load, then read `overshoots` (0 rows: the limits held).
 *
 * @since 0.4.0
 */
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { quoteIdentifier } from "./internal/admin.js"

export interface Overshoot {
  readonly topic: string
  /** '' for the topic's own limit; else the group whose limit was passed. */
  readonly group: string
  readonly inFlight: number
  readonly limit: number
}

/** Installs the checker in `schema` (the substrate's; default `durable`). Idempotent. */
export const install = (schema = "durable") =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const s = quoteIdentifier(schema)
    const statements = [
      `CREATE TABLE IF NOT EXISTS ${s}.flow_overshoots (
        topic text NOT NULL, group_key text NOT NULL, in_flight integer NOT NULL, max_in_flight integer NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp())`,
      `CREATE OR REPLACE FUNCTION ${s}.flow_check() RETURNS trigger LANGUAGE plpgsql AS $check$
      DECLARE
        topic_cap integer;
        group_cap integer;
        n integer;
      BEGIN
        SELECT l.max_in_flight, coalesce(g.max_in_flight, CASE WHEN NEW.group_key <> '' THEN l.group_max_in_flight END)
          INTO topic_cap, group_cap
          FROM ${s}.flow_limits l LEFT JOIN ${s}.flow_group_limits g ON g.topic = l.topic AND g.group_key = NEW.group_key
         WHERE l.topic = NEW.topic;
        IF topic_cap IS NOT NULL THEN
          SELECT count(*) INTO n FROM ${s}.outbox o
           WHERE o.topic = NEW.topic AND o.projected_at IS NULL AND o.dead_at IS NULL AND o.claimed_until > now();
          IF n > topic_cap THEN
            INSERT INTO ${s}.flow_overshoots (topic, group_key, in_flight, max_in_flight) VALUES (NEW.topic, '', n, topic_cap);
          END IF;
        END IF;
        IF group_cap IS NOT NULL THEN
          SELECT count(*) INTO n FROM ${s}.outbox o
           WHERE o.topic = NEW.topic AND o.group_key = NEW.group_key AND o.projected_at IS NULL AND o.dead_at IS NULL
             AND o.claimed_until > now();
          IF n > group_cap THEN
            INSERT INTO ${s}.flow_overshoots (topic, group_key, in_flight, max_in_flight)
            VALUES (NEW.topic, NEW.group_key, n, group_cap);
          END IF;
        END IF;
        RETURN NULL;
      END
      $check$`,
      `DROP TRIGGER IF EXISTS flow_check ON ${s}.outbox`,
      `CREATE TRIGGER flow_check AFTER UPDATE OF claim_generation ON ${s}.outbox
        FOR EACH ROW WHEN (NEW.claim_generation <> OLD.claim_generation AND NEW.claimed_until IS NOT NULL)
        EXECUTE FUNCTION ${s}.flow_check()`
    ]
    return Effect.forEach(statements, (statement) => sql.unsafe(statement), { discard: true })
  })

/** Every count above its limit the checker saw, oldest first. */
export const overshoots = (schema = "durable") =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.unsafe<Overshoot>(
      `SELECT topic, group_key AS "group", in_flight AS "inFlight", max_in_flight AS "limit"
         FROM ${quoteIdentifier(schema)}.flow_overshoots ORDER BY at`
    ))
