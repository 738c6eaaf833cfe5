/**
 * The live claim functions of both queues, whole, as the database holds them: each path its own
 * function, and the two claims every worker calls (`outbox_claim`, `inbox_claim`) dispatching to
 * them with the signatures of every release. `claimFunctions(t)` lists the statements that create
 * them, in creation order: what a path calls is created before it, the dispatchers last.
 */
import type { Tables } from "../flow/limits.js"
import { inboxClaim } from "./inboxClaim.js"
import { inboxClaimLimited } from "./inboxClaimLimited.js"
import { inboxClaimOpen } from "./inboxClaimOpen.js"
import { inboxClaimSlots } from "./inboxClaimSlots.js"
import { outboxClaim } from "./outboxClaim.js"
import { outboxClaimFair } from "./outboxClaimFair.js"
import { outboxClaimLimited } from "./outboxClaimLimited.js"
import { outboxClaimOpen } from "./outboxClaimOpen.js"
import { outboxClaimSlots } from "./outboxClaimSlots.js"
import { slotShare } from "./slotShare.js"

export const claimFunctions = (t: Tables): ReadonlyArray<string> => [
  ...slotShare(t),
  outboxClaimOpen(t),
  outboxClaimSlots(t),
  outboxClaimFair(t),
  outboxClaimLimited(t),
  outboxClaim(t),
  inboxClaimOpen(t),
  inboxClaimSlots(t),
  inboxClaimLimited(t),
  inboxClaim(t)
]
