/**
 * Every released version of the substrate's schema, as a record keyed `<version>_<name>`
 * (the shape `@effect/sql`'s `Migrator.fromRecord` takes). One module per version; a
 * released module is never edited (a test holds each one's text): a change is a new version.
 */
import type { Migration } from "../../Migrations.js"
import { migration as v1 } from "./0001_mutation_ledger.js"
import { migration as v2 } from "./0002_ledger_retention_index.js"
import { migration as v3 } from "./0003_outbox.js"
import { migration as v4 } from "./0004_inbox.js"
import { migration as v5 } from "./0005_outbox_key_order.js"
import { migration as v6 } from "./0006_fillfactor.js"
import { migration as v7 } from "./0007_claim_functions.js"
import { migration as v8 } from "./0008_leases_pauses_lookup.js"
import { migration as v9 } from "./0009_failure_history.js"
import { migration as v10 } from "./0010_fenced_batch_writes.js"
import { migration as v11 } from "./0011_drop_superseded_claims.js"
import { migration as v12 } from "./0012_keyed_runs.js"
import { migration as v13 } from "./0013_workflows.js"
import { migration as v14 } from "./0014_schedules.js"
import { migration as v15 } from "./0015_dedup_keys.js"
import { migration as v16 } from "./0016_cancellation.js"
import { migration as v17 } from "./0017_flow_limits.js"
import { migration as v18 } from "./0018_rate_limits.js"
import { migration as v19 } from "./0019_rate_limiter_store.js"
import { migration as v20 } from "./0020_claim_by_id.js"
import { migration as v21 } from "./0021_due_order.js"
import { migration as v22 } from "./0022_prune_by_id.js"
import { migration as v23 } from "./0023_named_groups_bounded.js"
import { migration as v24 } from "./0024_key_probe_ordered.js"
import { migration as v25 } from "./0025_inbox_limits.js"
import { migration as v26 } from "./0026_claim_rows.js"
import { migration as v27 } from "./0027_capacity_slots.js"
import { migration as v28 } from "./0028_rate_limiter_store_effect_415.js"

export const released: Readonly<Record<string, Migration>> = {
  "0001_mutation_ledger": v1,
  "0002_ledger_retention_index": v2,
  "0003_outbox": v3,
  "0004_inbox": v4,
  "0005_outbox_key_order": v5,
  "0006_fillfactor": v6,
  "0007_claim_functions": v7,
  "0008_leases_pauses_lookup": v8,
  "0009_failure_history": v9,
  "0010_fenced_batch_writes": v10,
  "0011_drop_superseded_claims": v11,
  "0012_keyed_runs": v12,
  "0013_workflows": v13,
  "0014_schedules": v14,
  "0015_dedup_keys": v15,
  "0016_cancellation": v16,
  "0017_flow_limits": v17,
  "0018_rate_limits": v18,
  "0019_rate_limiter_store": v19,
  "0020_claim_by_id": v20,
  "0021_due_order": v21,
  "0022_prune_by_id": v22,
  "0023_named_groups_bounded": v23,
  "0024_key_probe_ordered": v24,
  "0025_inbox_limits": v25,
  "0026_claim_rows": v26,
  "0027_capacity_slots": v27,
  "0028_rate_limiter_store_effect_415": v28
}
