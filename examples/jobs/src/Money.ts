/** Amounts are integers of cents; this is how they are shown: 2500 -> "25.00". */
export const format = (cents: number): string => {
  const abs = Math.abs(cents)
  return `${cents < 0 ? "-" : ""}${Math.floor(abs / 100)}.${String(abs % 100).padStart(2, "0")}`
}
