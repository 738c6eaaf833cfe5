/**
 * Version 25, released: never edit it (a test holds its text); add the next version instead.
 *
 * Limits on the stored inbox, per consumer: at most `max_in_flight` entries in flight across
 * every worker, and a token bucket (`rate_*`, on the database's clock) its claims spend one
 * token per entry from. The rules are the outbox's (versions 17, 18 and 22), for the one thing
 * an inbox claim names, its consumer; the inbox has no groups, so no per-group limits and no
 * fair share.
 *
 * - `inbox_limits`: a consumer's limits and its bucket (no row: no limits).
 * - `inbox_flow_leases`: the capacity each claim of a limited consumer took, a row per entry.
 *   Whether it is still taken is read from the entry (still open, the same claim generation,
 *   its lease running), so a completion, a release, a give-back, a cancellation or a lease that
 *   ran out returns it without a write of its own; each claim drops the rows that no longer
 *   hold one, probing each entry by id.
 * - The claim (same signature as version 8's): a consumer without a limits row claims exactly
 *   as before. Otherwise it locks the row (`FOR UPDATE`: claims of one limited consumer take
 *   turns), then counts in statements of their own — snapshots taken after the lock, which see
 *   every claim committed before it — and takes at most what the limit and the bucket leave.
 *   The bucket's clock is read after the lock, as the outbox's.
 * - A lease renewal of a limited consumer's entry (`inbox_renew_many`, and the single renewal
 *   the worker writes) asks what the outbox's asks since version 18: the lease still runs, by
 *   the clock, a sixth of a lease from now. A lease that ran out stays out: its capacity may
 *   already be another claim's.
 */
import type { Migration } from "../../Migrations.js"
import { inboxClaimQuery } from "./0008_leases_pauses_lookup.js"
import { type Limits, limitsLock, renewManyFunction } from "./0017_flow_limits.js"
import { bucket, rateColumns, renewableInTime, topicRate } from "./0018_rate_limits.js"

/** The inbox's limits, per consumer. */
export const CONSUMER_LIMITS: Limits = { table: "inbox_limits", key: "consumer" }

/** What an inbox lease renewal asks since this version (`lease`: the new lease's seconds, SQL). */
export const inboxRenewable = (t: (table: string) => string, q: string, lease: string) =>
  renewableInTime(t, q, lease, CONSUMER_LIMITS)

/** That the capacity row `f` is still taken: its entry, found by id, open, same generation, lease running. */
const held = (t: (table: string) => string, f: string) =>
  `coalesce((
   SELECT true FROM ${t("inbox")} i
    WHERE i.id = ${f}.id AND i.claim_generation = ${f}.generation AND i.processed_at IS NULL
      AND i.dead_at IS NULL AND i.claimed_until > now()), false)`

const claimFunction = (t: (table: string) => string) => {
  const tokens = bucket(t, "l", topicRate)
  return `CREATE OR REPLACE FUNCTION ${t("inbox_claim")}(text, integer, double precision, text, integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    consumer text, message_id text, payload jsonb, headers jsonb, received_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
DECLARE
  clk timestamptz;
  free integer;
BEGIN
PERFORM pg_advisory_xact_lock_shared(${limitsLock(t, CONSUMER_LIMITS)});
-- The consumer's limits, locked: one claim of a limited consumer at a time.
PERFORM 1 FROM ${t("inbox_limits")} l WHERE l.consumer = $4 FOR UPDATE;
IF NOT FOUND THEN
  RETURN QUERY
${inboxClaimQuery(t)};
  RETURN;
END IF;
-- The bucket's clock: after the lock, so a claim that waited for it does not spend at the time it began.
clk := clock_timestamp();
-- A new snapshot from here on: every claim committed before the lock is seen. The capacities
-- no longer taken (their entry settled, given back, cancelled, its lease run out) are dropped.
DELETE FROM ${t("inbox_flow_leases")} f WHERE f.consumer = $4 AND NOT ${held(t, "f")};
SELECT least($2,
         CASE WHEN l.max_in_flight IS NULL THEN $2
         ELSE greatest(l.max_in_flight - (SELECT count(*) FROM ${
    t("inbox_flow_leases")
  } f WHERE f.consumer = $4), 0)::integer END,
         CASE WHEN l.rate_limit IS NULL THEN $2 ELSE floor(${tokens})::integer END)
  INTO free FROM ${t("inbox_limits")} l WHERE l.consumer = $4;
IF free < 1 THEN
  RETURN;
END IF;
RETURN QUERY
WITH claimed (id, generation, attempt, exhausted, consumer, message_id, payload, headers, received_at) AS (
${inboxClaimQuery(t, "free")}),
leased AS (
  INSERT INTO ${t("inbox_flow_leases")} (id, generation, consumer)
  SELECT c.id::bigint, c.generation::bigint, $4 FROM claimed c WHERE NOT c.exhausted
  ON CONFLICT (id) DO UPDATE SET generation = excluded.generation),
spent AS (
  -- A consumer with a rate spends a token per entry taken.
  UPDATE ${t("inbox_limits")} l SET tokens = ${tokens} - (SELECT count(*) FROM claimed c WHERE NOT c.exhausted),
                                   tokens_at = clk
   WHERE l.consumer = $4 AND l.rate_limit IS NOT NULL)
SELECT * FROM claimed;
END
$claim$`
}

export const migration: Migration = {
  version: 25,
  name: "limits on the stored inbox",
  statements: (t) => [
    `CREATE TABLE ${t("inbox_limits")} (
        consumer text PRIMARY KEY,
        max_in_flight integer CHECK (max_in_flight > 0),
        tokens double precision,
        tokens_at timestamptz,
        updated_at timestamptz NOT NULL DEFAULT now(),
        updated_by text NOT NULL
      )`,
    `ALTER TABLE ${t("inbox_limits")}
       ${rateColumns("").join(",\n       ")}`,
    `CREATE TABLE ${t("inbox_flow_leases")} (
        id bigint PRIMARY KEY,
        generation bigint NOT NULL,
        consumer text NOT NULL
      )`,
    `CREATE INDEX inbox_flow_leases_consumer_idx ON ${t("inbox_flow_leases")} (consumer)`,
    claimFunction(t),
    renewManyFunction(t, inboxRenewable(t, "q", "p_lease_seconds"), "clock_timestamp()", {
      name: "inbox",
      done: "processed_at"
    })
  ]
}
