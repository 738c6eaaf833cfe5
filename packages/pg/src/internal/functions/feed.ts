/**
 * The feed's positions: where a row stands in the commit-ordered feed (`Feed`), and the horizon
 * below which every position is final.
 *
 * A row's position is the id of the transaction that wrote it (`pg_current_xact_id()`), with the
 * lineage's epoch above bit 48. Ids are taken when a transaction first writes and rows become
 * visible when it commits, so a row can appear behind one already read; but every transaction
 * whose id is below the snapshot's `xmin` has ended, so a reader that reads only below that
 * horizon (in the same statement, under the same snapshot) sees each row once, in one total
 * order, and never finds one later behind its cursor.
 *
 * The epoch carries positions across a dump and restore (or `pg_upgrade`, or a logical copy):
 * a new cluster (another `system_identifier`) starts transaction ids again from the bottom, so
 * its first write takes the next epoch (`feed_lineage`), and its positions start above every
 * restored one. A physical failover keeps the system identifier and the ids: same epoch. The
 * epoch is kept in a session setting once looked up (reading the control file costs ten
 * microseconds, the setting half of one); a session never outlives its cluster. Transaction ids
 * stay below 2^48 for 281 trillion transactions.
 */
import type { Tables } from "../flow/limits.js"

/**
 * The name of the session setting that keeps the schema's epoch, as SQL: named for the
 * lineage table's OID (folded to a constant where planned), so each schema has its own, and a
 * lineage dropped and made again (a restore with `--clean`, a schema migrated anew) is looked up
 * afresh by sessions that outlived the old one (a pooler's server connections).
 */
export const epochSetting = (t: Tables) => `'effect_durable.feed_epoch_' || '${t("feed_lineage")}'::regclass::oid::text`

/** The epoch, from the session's setting when it has one. */
const epoch = (t: Tables) =>
  `coalesce(nullif(current_setting(${epochSetting(t)}, true), '')::bigint, ${t("feed_epoch")}())`

export const feedFunctions = (t: Tables): ReadonlyArray<string> => [
  // The lineage's epoch of the cluster this session runs on; a cluster not seen yet takes the
  // next. Run as the owner: the first write of a new cluster may be any role's.
  `CREATE OR REPLACE FUNCTION ${t("feed_epoch")}()
  RETURNS bigint
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $feed$
DECLARE
  cluster text := (SELECT system_identifier::text FROM pg_control_system());
  found bigint;
BEGIN
  -- This cluster's epoch, if it is the latest: a cluster seen before that a later one's dump was
  -- restored into (a cutover rolled back) takes a new epoch, above the restored positions.
  SELECT epoch INTO found FROM ${t("feed_lineage")} WHERE system_identifier = cluster
     AND epoch = (SELECT max(epoch) FROM ${t("feed_lineage")});
  IF found IS NULL THEN
    -- Two first writers of a new epoch: one inserts, the other waits for it and reads its row
    -- (under REPEATABLE READ the other fails with a serialization failure instead: retryable).
    INSERT INTO ${t("feed_lineage")} (epoch, system_identifier)
      SELECT coalesce(max(epoch), 0) + 1, cluster FROM ${t("feed_lineage")}
    ON CONFLICT DO NOTHING;
    SELECT epoch INTO found FROM ${t("feed_lineage")} WHERE system_identifier = cluster
       AND epoch = (SELECT max(epoch) FROM ${t("feed_lineage")});
    IF found IS NULL THEN
      RAISE EXCEPTION 'effect-durable: the feed lineage of cluster % could not be recorded; try again', cluster
        USING ERRCODE = '40001';
    END IF;
  END IF;
  PERFORM set_config(${epochSetting(t)}, found::text, false);
  RETURN found;
END
$feed$`,
  // A row's position: the writing transaction's id, in the cluster's epoch.
  `CREATE OR REPLACE FUNCTION ${t("feed_position")}()
  RETURNS bigint
  LANGUAGE sql
  VOLATILE
AS $feed$
  SELECT (${epoch(t)} << 48) + pg_current_xact_id()::text::bigint
$feed$`,
  // The horizon: every position below it is final in the calling statement's snapshot. Stable,
  // so that it reads that snapshot: a volatile function's statement would take a later one, whose
  // horizon could pass a transaction the caller's snapshot still saw running.
  `CREATE OR REPLACE FUNCTION ${t("feed_horizon")}()
  RETURNS bigint
  LANGUAGE sql
  STABLE
AS $feed$
  SELECT (${epoch(t)} << 48) + pg_snapshot_xmin(pg_current_snapshot())::text::bigint
$feed$`
]
