import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as BatchHandlerExample from "../examples/batch-handler.js"
import * as ProjectorExample from "../examples/projector.js"
import { substrate } from "./support.js"

describe("the README examples of the projector do what the README says", () => {
  it.layer(substrate())((it) => {
    it.effect("projector: the routed topic is delivered, the unrouted one is a dead letter at once", () =>
      Effect.gen(function*() {
        expect(yield* ProjectorExample.program).toMatchObject({ claimed: 2, delivered: 1, dead: 1 })
      }))

    it.effect("batch handler: the products are indexed in one call, the message that is not one is a dead letter", () =>
      Effect.gen(function*() {
        const { counts, indexed } = yield* BatchHandlerExample.program
        expect(counts).toMatchObject({ claimed: 5, delivered: 4, dead: 1 })
        expect(indexed).toBe(4)
      }))
  })
})
