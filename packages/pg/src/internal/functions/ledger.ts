/**
 * The ledger's first step in one round trip: the lock wait bounded (its settings as the caller's
 * transaction had them, returned to be restored), the advisory lock on the identity's hash taken
 * (or tried), and the record read, `FOR UPDATE` when the lock is held.
 */
import type { Tables } from "../flow/limits.js"

export const mutationLookup = (t: Tables): string =>
  `CREATE OR REPLACE FUNCTION ${
    t("mutation_lookup")
  }(p_subject text, p_operation text, p_key text, p_lock bigint, p_wait boolean,
    p_lock_timeout text, p_statement_timeout text)
  RETURNS TABLE (locked boolean, previous_lock_timeout text, previous_statement_timeout text, kind text,
    eligibility bytea, request_fingerprint bytea, status text, response jsonb, response_body bytea, response_meta jsonb,
    recorded_at text)
  LANGUAGE plpgsql
AS $lookup$
#variable_conflict use_column
DECLARE
  got boolean;
  prev_lock text := current_setting('lock_timeout');
  prev_statement text := current_setting('statement_timeout');
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout, true);
  IF p_statement_timeout IS NOT NULL THEN
    PERFORM set_config('statement_timeout', p_statement_timeout, true);
  END IF;
  IF p_wait THEN
    PERFORM pg_advisory_xact_lock(p_lock);
    got := true;
  ELSE
    got := pg_try_advisory_xact_lock(p_lock);
  END IF;
  IF got THEN
    RETURN QUERY SELECT true, prev_lock, prev_statement, r.kind, r.eligibility, r.request_fingerprint, r.status,
                        r.response, r.response_body, r.response_meta, to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
      FROM ${t("mutation_records")} r
     WHERE r.subject = p_subject AND r.operation = p_operation AND r.key = p_key
       FOR UPDATE;
  ELSE
    RETURN QUERY SELECT false, prev_lock, prev_statement, r.kind, r.eligibility, r.request_fingerprint, r.status,
                        r.response, r.response_body, r.response_meta, to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
      FROM ${t("mutation_records")} r
     WHERE r.subject = p_subject AND r.operation = p_operation AND r.key = p_key;
  END IF;
  IF NOT FOUND THEN
    RETURN QUERY SELECT got, prev_lock, prev_statement, NULL::text, NULL::bytea, NULL::bytea, NULL::text, NULL::jsonb,
                        NULL::bytea, NULL::jsonb, NULL::text;
  END IF;
END
$lookup$`
