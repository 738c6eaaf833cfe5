import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as ProjectorExample from "../examples/projector.js"
import { substrate } from "./support.js"

describe("the README examples of the projector do what the README says", () => {
  it.layer(substrate())((it) => {
    it.effect("projector: the routed topic is delivered, the unrouted one is a dead letter at once", () =>
      Effect.gen(function*() {
        expect(yield* ProjectorExample.program).toMatchObject({ claimed: 2, delivered: 1, dead: 1 })
      }))
  })
})
