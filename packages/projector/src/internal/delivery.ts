/**
 * One claimed batch while it is delivered: the state its lanes, the keeper and its marks
 * share, in one place, changed only through the named operations below. Each says what it
 * means for the batch's messages; every read the three roles need is a question here.
 */
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import type * as Fiber from "effect/Fiber"

type Claim = OutboxWorker.OutboxMessage["claim"]

export class Delivery {
  /**
   * Claims whose lease still matters: every claim of the batch until it is taken to be
   * marked, found stale, or the batch ends. The keeper renews their leases: a success
   * waiting for its mark, or a failure waiting for its release, must not lapse and be claimed
   * again behind a slow delivery of the same batch.
   */
  private readonly leased: Map<string, Claim>
  /** Ids whose claim a renewal found stale: never published if not started, their outcome never written. */
  private readonly stale = new Set<string>()
  /** A renewal failed: the leases are in doubt, so messages not started yet are not published. */
  private inDoubt = false
  /** Ids never published because of the two above. */
  private readonly skipped = new Set<string>()
  /** Ids of a keyed run never published: an earlier message of their key did not succeed. */
  private readonly heldBack = new Set<string>()
  /** Indexes (in the batch) of messages published and not yet taken to be marked. */
  private published: Array<number> = []
  /** Publishes running, by message id: their lane and deadline. */
  private readonly running = new Map<
    string,
    { readonly lane: Fiber.Fiber<unknown, unknown>; readonly deadline: number; readonly shared: boolean }
  >()
  /** Ids whose publish the keeper cut at its deadline. */
  private readonly expired = new Set<string>()
  /** Ids cancelled while this batch held them: never written, their publish cut if running. */
  private readonly cancelled = new Set<string>()
  private renewAt: number
  /**
   * Until when (Clock milliseconds) the leases surely hold: a lease runs from when its claim
   * or renewal statement ran, which is no earlier than when it was sent. So the clock of a
   * batch starts when its claim was sent, not when the rows came back: a claim slowed by a
   * loaded machine returns leases already partly spent (one that took 17 s of a 30 s lease was
   * seen), and renewing a third of a lease after the rows came back was then too late.
   */
  private heldUntil: number
  /** Indexes done with: marked, or the batch is over (each told to `onEnded` once). */
  private readonly ended = new Set<number>()

  constructor(
    private readonly claimed: ReadonlyArray<OutboxWorker.OutboxMessage>,
    private readonly renewEveryMillis: number,
    private readonly leaseMillis: number,
    /** When the claim was sent. */
    claimedAt: number,
    /** Told, once per message, when the batch is done with it: its mark written, or the batch over. */
    private readonly onEnded: (count: number) => void = () => {}
  ) {
    this.leased = new Map(claimed.map((message) => [message.id, message.claim] as const))
    this.renewAt = claimedAt + renewEveryMillis
    this.heldUntil = claimedAt + leaseMillis
  }

  /** The claimed message with this id, if it is of this batch. */
  message(id: string): OutboxWorker.OutboxMessage | undefined {
    return this.claimed.find((message) => message.id === id)
  }

  // The lanes.

  /**
   * Whether a message not started yet may be published at `now`: its lease is neither lost nor
   * in doubt, and surely holds for half a renewal period more — time for the keeper's next tick
   * to renew it (a renewal due is sent within that). A lease that may run out first could become
   * another worker's mid-publish: the message is given back instead. A batch renewed on time
   * always has two thirds of a lease ahead; only a claim that came back late meets this.
   */
  mayStart(id: string, now: number): boolean {
    return !this.inDoubt && !this.stale.has(id) && now + this.renewEveryMillis / 2 < this.heldUntil
  }
  /** A message left unpublished because its lease was lost or in doubt. */
  skip(id: string): void {
    this.skipped.add(id)
  }
  /** A message of a keyed run left unpublished behind one of its key that did not succeed. */
  holdBack(id: string): void {
    this.heldBack.add(id)
  }
  /**
   * A publish began on `lane`; the keeper cuts it at `deadline` (Clock milliseconds). `shared`:
   * the call carries other messages too (a batch), so cancelling this one does not cut it.
   */
  started(
    id: string,
    lane: Fiber.Fiber<unknown, unknown>,
    deadline: number,
    { shared = false }: { readonly shared?: boolean } = {}
  ): void {
    this.running.set(id, { lane, deadline, shared })
  }
  /** A publish ended; a success waits for its mark. */
  finished(index: number, succeeded: boolean): void {
    if (succeeded) this.published.push(index)
    this.running.delete(this.claimed[index]!.id)
  }
  /** Whether the keeper cut this message's publish at its deadline. */
  timedOut(id: string): boolean {
    return this.expired.has(id)
  }

  // Cancellation (`OutboxAdmin.cancel`, heard on the cancel channel).

  /**
   * The message was cancelled: its outcome is never written (the row refuses it anyway), it is
   * never started if it has not been, and a publish under way is interrupted on its lane (the
   * handler sees the interruption) unless the call carries other messages too. Whether this
   * batch holds it.
   */
  cancel(id: string): boolean {
    if (this.message(id) === undefined) return false
    this.cancelled.add(id)
    this.lost([id])
    const running = this.running.get(id)
    if (running !== undefined && !running.shared && running.lane.pollUnsafe() === undefined) {
      running.lane.interruptUnsafe()
    }
    return true
  }
  /** Whether the message was cancelled while this batch held it. */
  wasCancelled(id: string): boolean {
    return this.cancelled.has(id)
  }

  // The keeper.

  /** Interrupts every publish past its deadline, once, in one synchronous step (by the fiber `keeper`). */
  cutOverdue(now: number, keeper: number): void {
    for (const [id, { deadline, lane }] of this.running) {
      if (deadline <= now && lane.pollUnsafe() === undefined && !this.expired.has(id)) {
        this.expired.add(id)
        lane.interruptUnsafe(keeper)
      }
    }
  }
  /** Whether the leases are due for renewal at `now`; if so, the next one is scheduled. */
  renewalDue(now: number): boolean {
    if (this.renewAt > now) return false
    this.renewAt = now + this.renewEveryMillis
    return true
  }
  /** Renew at the next tick (a catch-up: the cancel channel's LISTEN was just (re)established). */
  renewSoon(): void {
    this.renewAt = 0
  }
  /** The claims whose leases a renewal extends. */
  leases(): ReadonlyArray<Claim> {
    return [...this.leased.values()]
  }
  /** A renewal sent at `sentAt` answered: the leases it did not find lost hold a lease from then. */
  renewed(sentAt: number): void {
    this.heldUntil = Math.max(this.heldUntil, sentAt + this.leaseMillis)
  }
  /** A renewal found these claims taken over: their messages are left to the new holders. */
  lost(ids: ReadonlyArray<string>): void {
    for (const id of ids) {
      this.stale.add(id)
      this.leased.delete(id)
    }
  }
  /** A renewal failed or did not answer in time: the leases are in doubt. */
  doubt(): void {
    this.inDoubt = true
  }

  // The marks.

  /** The published claims to mark now (never a stale one), out of the renewals while marked. */
  takePublished(): ReadonlyArray<number> {
    const taken = this.published.splice(0).filter((i) => !this.stale.has(this.claimed[i]!.id))
    for (const i of taken) this.leased.delete(this.claimed[i]!.id)
    return taken
  }
  /** Published messages whose marks were written: done with. */
  marked(taken: ReadonlyArray<number>): void {
    let count = 0
    for (const i of taken) {
      if (this.ended.has(i)) continue
      this.ended.add(i)
      count++
    }
    if (count > 0) this.onEnded(count)
  }
  /** A mark that failed: its claims wait for the next one, their leases renewed again. */
  putBack(taken: ReadonlyArray<number>): void {
    this.published.push(...taken)
    for (const i of taken) this.leased.set(this.claimed[i]!.id, this.claimed[i]!.claim)
  }

  // The batch's end.

  /** Never published: the lease was lost or in doubt. */
  wasSkipped(id: string): boolean {
    return this.skipped.has(id)
  }
  /** Never published: held back behind an earlier message of its key. */
  wasHeldBack(id: string): boolean {
    return this.heldBack.has(id)
  }
  /** The claim went stale: its outcome is never written. */
  isStale(id: string): boolean {
    return this.stale.has(id)
  }
  /** The batch is over (settled, or cut at shutdown): every message not told ended yet is, at once. */
  over(): void {
    const left = this.claimed.length - this.ended.size
    for (let i = 0; i < this.claimed.length; i++) this.ended.add(i)
    if (left > 0) this.onEnded(left)
  }
}
