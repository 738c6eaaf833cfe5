/** Version 1, released: never edit it (a test holds its text); add the next version instead. */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 1,
  name: "mutation ledger",
  statements: (t) => [
    `CREATE TABLE ${t("mutation_records")} (
        subject text NOT NULL,
        operation text NOT NULL,
        key text NOT NULL,
        kind text NOT NULL,
        eligibility bytea NOT NULL,
        request_fingerprint bytea NOT NULL,
        status text NOT NULL,
        response jsonb NOT NULL,
        effect_applied boolean GENERATED ALWAYS AS (status = 'accepted') STORED,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT mutation_records_pkey PRIMARY KEY (subject, operation, key),
        CONSTRAINT mutation_records_status_check CHECK (status IN ('accepted', 'rejected')),
        CONSTRAINT mutation_records_fingerprint_length CHECK (octet_length(request_fingerprint) = 32)
      )`
  ]
}
