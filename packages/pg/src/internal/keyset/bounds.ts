/**
 * A text column's bound read from its CHECK constraints: the schemas people make bound a `text`
 * id with `CHECK (length(id) <= 26)` (on the column or on a domain over it) rather than with a
 * `varchar(26)`, and the catalog takes such a bound as it takes a type's. Only validated
 * constraints count (a `NOT VALID` one says nothing of the rows already there), and only a
 * conjunct that holds for every row: `length(x) <= n` (or `char_length`, `character_length`,
 * `octet_length`, or `<`) alone or ANDed with others, never under an OR.
 */

const LENGTH_FUNCTIONS = ["length", "char_length", "character_length", "octet_length"]

/** Strips parentheses that wrap the whole expression. */
const unwrap = (text: string): string => {
  let expression = text.trim()
  while (expression.startsWith("(") && closingOf(expression, 0) === expression.length - 1) {
    expression = expression.slice(1, -1).trim()
  }
  return expression
}

/** The index of the parenthesis closing the one at `open` (string literals skipped). */
const closingOf = (text: string, open: number): number => {
  let depth = 0
  let quoted = false
  for (let i = open; i < text.length; i++) {
    const c = text[i]
    if (c === "'") quoted = !quoted
    if (quoted) continue
    if (c === "(") depth++
    if (c === ")" && --depth === 0) return i
  }
  return -1
}

/** The top-level conjuncts of an expression (`a AND b AND c`), or the expression alone. */
const conjuncts = (text: string): ReadonlyArray<string> => {
  const parts: Array<string> = []
  let depth = 0
  let quoted = false
  let start = 0
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (c === "'") quoted = !quoted
    if (quoted) continue
    if (c === "(") depth++
    if (c === ")") depth--
    if (depth === 0 && text.startsWith(" AND ", i)) {
      parts.push(text.slice(start, i))
      start = i + 5
    }
  }
  parts.push(text.slice(start))
  return parts.map(unwrap)
}

/**
 * `subject` as a length function's argument deparses it: `id`, `(id)::text`, `"Order Id"`,
 * `VALUE`. Only the casts the deparser adds itself are looked through: one the constraint's
 * author wrote (`::bpchar`, which drops trailing blanks, `::name`, which truncates) measures
 * something else than the value.
 */
const isSubject = (argument: string, subjects: ReadonlyArray<string>) => {
  const bare = unwrap(argument.replace(/::(text|character varying|citext)$/, ""))
  return subjects.includes(bare)
}

const bound = (conjunct: string, subjects: ReadonlyArray<string>): number | undefined => {
  // fn(subject) <= n, fn(subject) < n
  const match = /^([a-z_]+)\((.*)\) (<=|<) (\d+)$/.exec(conjunct)
  if (match === null) return undefined
  const [, fn, argument, operator, limit] = match
  if (!LENGTH_FUNCTIONS.includes(fn!) || !isSubject(argument!, subjects)) return undefined
  const n = Number(limit)
  return operator === "<" ? n - 1 : n
}

/**
 * The most characters (or bytes, which are at least as many) a column's values have by its
 * validated CHECK constraints as `pg_get_constraintdef` writes them: `subjects` are the ways
 * they name the value (the column's quoted name; `VALUE` in a domain's). `undefined`: none says.
 */
export const checkBound = (definitions: ReadonlyArray<string>, subjects: ReadonlyArray<string>): number | undefined => {
  let least: number | undefined
  for (const definition of definitions) {
    // A NO INHERIT constraint does not hold in the table's children, which a page reads too.
    const body = /^CHECK \((.*)\)$/s.exec(definition.trim())
    if (body === null) continue
    for (const conjunct of conjuncts(unwrap(body[1]!))) {
      const n = bound(conjunct, subjects)
      if (n !== undefined && n >= 0 && (least === undefined || n < least)) least = n
    }
  }
  return least
}
