/**
 * Version 11, released: never edit it (a test holds its text); add the next version instead.
 *
 * Drops the claim functions version 8 superseded (version 7's, without the lease bound): code
 * of this release and the one before calls only version 8's. From here on, a migration that
 * replaces a claim function drops the overload it replaces in the same version, so the
 * database holds one claim per queue, the one `explainClaim` reads and explains.
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 11,
  name: "drop superseded claim functions",
  statements: (t) => [
    `DROP FUNCTION IF EXISTS ${t("outbox_claim")}(text, integer, double precision, text[])`,
    `DROP FUNCTION IF EXISTS ${t("inbox_claim")}(text, integer, double precision, text)`
  ]
}
