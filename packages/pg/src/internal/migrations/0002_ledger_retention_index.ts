/** Version 2, released: never edit it (a test holds its text); add the next version instead. */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 2,
  name: "mutation ledger retention index",
  statements: (t) => [
    `CREATE INDEX mutation_records_created_at_idx ON ${t("mutation_records")} (created_at)`
  ]
}
