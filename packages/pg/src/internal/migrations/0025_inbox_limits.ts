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
 * - `inbox_flow_claims`: what each claim of a consumer with an in-flight limit took — one row
 *   per claim, its entries and their claim generations, and `taken`: how many of them may
 *   still hold their capacity. An entry holds it while it is open, at that generation, its
 *   lease running, so a completion, a release, a give-back, a cancellation or a lease that ran
 *   out returns it without a write of its own. `taken` only ever overstates (an entry leaves
 *   the held state; only a claim, which records its own row, puts one back): the claim counts
 *   exactly, probing each entry by id, only when the sum of `taken` leaves less room than it
 *   asks for or the rows pile up (more than 32), and then oldest claim first, until it has
 *   found the room and brought the rows back to 32. The outbox's limited claim (version 17)
 *   writes a row per message and probes every one at every claim: a limit that never bound
 *   halved a no-op drain (bench, 2026-12-05). A row per claim and a count when it matters leave
 *   a claim of the inbox one insert, and a probe per entry only when it counts. Where more than
 *   32 claims are under way at once, or a claim asks for more than the limit, it counts at every
 *   claim, as before.
 * - The claim (same signature as version 8's): a consumer without a limits row claims exactly
 *   as before. Otherwise it locks the row (`FOR UPDATE`: claims of one limited consumer take
 *   turns), then counts in statements of their own — snapshots taken after the lock, which see
 *   every claim committed before it — and takes at most what the limit and the bucket leave.
 *   The bucket's clock is read after the lock, as the outbox's. A consumer with a rate and no
 *   in-flight limit records nothing.
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

/**
 * That the entry `u.id`, claimed at generation `u.generation`, still holds its capacity: open,
 * same generation, lease running. A scalar subquery, so each entry is one probe by id (an EXISTS
 * may be planned as a semi-join over the whole inbox, as the outbox's prune was before version 22).
 */
export const inboxHeld = (t: (table: string) => string) =>
  `coalesce((
       SELECT true FROM ${t("inbox")} i
        WHERE i.id = u.id AND i.claim_generation = u.generation AND i.processed_at IS NULL
          AND i.dead_at IS NULL AND i.claimed_until > now()), false)`

/** The most claim rows of a consumer before a claim counts them exactly, whatever the room. */
const MAX_CLAIM_ROWS = 32

/** The inbox claim function's signature (version 8's), up to its declarations. */
export const inboxClaimSignature = (t: (table: string) => string) =>
  `CREATE OR REPLACE FUNCTION ${t("inbox_claim")}(text, integer, double precision, text, integer)
  RETURNS TABLE (id text, generation text, attempt integer, exhausted boolean,
    consumer text, message_id text, payload jsonb, headers jsonb, received_at text)
  LANGUAGE plpgsql
  SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column`

/** The CTE `claimed`: the inbox claim of at most `limit` entries, its rows as the function returns them. */
export const inboxClaimed = (t: (table: string) => string, limit: string) =>
  `WITH claimed (id, generation, attempt, exhausted, consumer, message_id, payload, headers, received_at) AS (
${inboxClaimQuery(t, limit)})`

/** This version's declarations of the limited inbox claim (`limitedInboxClaim`'s variables). */
export const limitedInboxDeclare = `
  clk timestamptz;
  cap integer;
  taken_now bigint;
  claim_rows bigint;
  claim_row record;
  still integer;
  free integer;`

/**
 * The claim of a limited consumer `$4` once its limits row is locked and `cap` holds its
 * in-flight limit: count (exactly where it matters), take what the limit and the bucket leave,
 * record it. Its last statement returns the claimed rows.
 */
export const limitedInboxClaim = (t: (table: string) => string) => {
  const tokens = bucket(t, "l", topicRate)
  const claims = t("inbox_flow_claims")
  return `-- The bucket's clock: after the lock, so a claim that waited for it does not spend at the time it began.
clk := clock_timestamp();
IF cap IS NOT NULL THEN
  -- A new snapshot from here on: every claim committed before the lock is seen. What the claims
  -- took, at most.
  SELECT coalesce(sum(c.taken), 0), count(*) INTO taken_now, claim_rows FROM ${claims} c WHERE c.consumer = $4;
  -- Counted exactly (each entry probed by id, a claim with nothing held left dropped) only when
  -- that leaves less room than this claim asks for, or the rows piled up: oldest claims first
  -- (the likeliest settled), until the room is found.
  IF taken_now + $2 > cap OR claim_rows > ${MAX_CLAIM_ROWS} THEN
    FOR claim_row IN SELECT c.id, c.entries, c.generations, c.taken FROM ${claims} c WHERE c.consumer = $4 ORDER BY c.id LOOP
      EXIT WHEN taken_now + $2 <= cap AND claim_rows <= ${MAX_CLAIM_ROWS};
      SELECT count(*) INTO still FROM unnest(claim_row.entries, claim_row.generations) u(id, generation) WHERE ${
    inboxHeld(t)
  };
      IF still = 0 THEN
        DELETE FROM ${claims} c WHERE c.id = claim_row.id;
        claim_rows := claim_rows - 1;
      ELSIF still < claim_row.taken THEN
        UPDATE ${claims} c SET taken = still WHERE c.id = claim_row.id;
      END IF;
      taken_now := taken_now - claim_row.taken + still;
    END LOOP;
  END IF;
END IF;
SELECT least($2,
         CASE WHEN cap IS NULL THEN $2 ELSE greatest(cap - taken_now, 0)::integer END,
         CASE WHEN l.rate_limit IS NULL THEN $2 ELSE floor(${tokens})::integer END)
  INTO free FROM ${t("inbox_limits")} l WHERE l.consumer = $4;
IF free < 1 THEN
  RETURN;
END IF;
RETURN QUERY
${inboxClaimed(t, "free")},
recorded AS (
  -- What this claim took, one row (a consumer with an in-flight limit only).
  INSERT INTO ${claims} (consumer, entries, generations, taken)
  SELECT $4, array_agg(c.id::bigint), array_agg(c.generation::bigint), count(*) FROM claimed c
   WHERE NOT c.exhausted AND cap IS NOT NULL
  HAVING count(*) > 0),
spent AS (
  -- A consumer with a rate spends a token per entry taken.
  UPDATE ${t("inbox_limits")} l SET tokens = ${tokens} - (SELECT count(*) FROM claimed c WHERE NOT c.exhausted),
                                   tokens_at = clk
   WHERE l.consumer = $4 AND l.rate_limit IS NOT NULL)
SELECT * FROM claimed;`
}

const claimFunction = (t: (table: string) => string) =>
  `${inboxClaimSignature(t)}
DECLARE${limitedInboxDeclare}
BEGIN
PERFORM pg_advisory_xact_lock_shared(${limitsLock(t, CONSUMER_LIMITS)});
-- The consumer's limits, locked: one claim of a limited consumer at a time.
SELECT l.max_in_flight INTO cap FROM ${t("inbox_limits")} l WHERE l.consumer = $4 FOR UPDATE;
IF NOT FOUND THEN
  RETURN QUERY
${inboxClaimQuery(t)};
  RETURN;
END IF;
${limitedInboxClaim(t)}
END
$claim$`

/**
 * What a consumer's claims hold now, exactly: each recorded entry still open, at its claim's
 * generation, its lease running (`c`: a row of `inbox_flow_claims`). `FlowControl` lists it.
 */
export const heldOfClaim = (t: (table: string) => string, c: string) => entriesHeld(c, inboxHeld(t))

/**
 * How many of the entries recorded in the claim row `c` (its `entries` and `generations`) meet
 * `isHeld`, a condition over `u.id` and `u.generation`: the inbox's count and the outbox's
 * (version 26) alike.
 */
export const entriesHeld = (c: string, isHeld: string) =>
  `(SELECT count(*) FROM unnest(${c}.entries, ${c}.generations) u(id, generation) WHERE ${isHeld})`

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
    `CREATE TABLE ${t("inbox_flow_claims")} (
        id bigserial PRIMARY KEY,
        consumer text NOT NULL,
        entries bigint[] NOT NULL,
        generations bigint[] NOT NULL,
        taken integer NOT NULL CHECK (taken > 0)
      )`,
    `CREATE INDEX inbox_flow_claims_consumer_idx ON ${t("inbox_flow_claims")} (consumer)`,
    claimFunction(t),
    renewManyFunction(t, inboxRenewable(t, "q", "p_lease_seconds"), "clock_timestamp()", {
      name: "inbox",
      done: "processed_at"
    })
  ]
}
