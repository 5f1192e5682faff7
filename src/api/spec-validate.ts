/**
 * The spec's request-body schemas as a server-side backstop.
 *
 * Every operation of the generated spec (src/protocol/generated/openapi.json,
 * from protocol/openapi.yaml) that takes a JSON body has its body schema
 * compiled with Ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1). Routes
 * call checkBody() AFTER their hand-written validators, which keep producing
 * today's codes and messages; checkBody() then refuses whatever the spec does
 * not allow and slipped through, with 400, the route's error code and a
 * message that starts with the field path (`actions[1].coordinate[0]: ...`),
 * like the hand-written ones.
 */
import { readFileSync } from 'node:fs';
import Ajv2020Module from 'ajv/dist/2020.js';
import type { ErrorObject, ValidateFunction } from 'ajv/dist/2020.js';
import { type ErrorCode, ValidationError } from '../common/errors.ts';

type Json = Record<string, any>;

/**
 * The error code of each JSON-body operation (the one its hand-written
 * validator uses), and, for parts of the body that the hand-written code
 * reports under another code, that code by field prefix (first match wins).
 */
export const BODY_CODES: Record<string, { code: ErrorCode; byField?: [prefix: string, code: ErrorCode][] }> = {
  createSession: { code: 'invalid_spec' },
  resetSession: { code: 'invalid_request' },
  putPool: { code: 'invalid_pool' },
  releaseSession: { code: 'invalid_request' },
  addPoolMember: { code: 'invalid_request' },
  forkSession: { code: 'invalid_fork' },
  execInSession: { code: 'invalid_exec' },
  takeOver: { code: 'invalid_request' },
  setEpisodeOutcome: { code: 'invalid_outcome' },
  joinClientCgroup: { code: 'invalid_request' },
  runActions: {
    code: 'invalid_action',
    byField: [
      ['generation', 'invalid_request'],
      ['scale', 'invalid_region'],
      ['screenshot.region', 'invalid_region'],
      ['screenshot.scale', 'invalid_region'],
      ['screenshot', 'invalid_format'],
    ],
  },
};

const SPEC_ID = 'drums-openapi';
const Ajv2020 = (Ajv2020Module as unknown as { default: typeof Ajv2020Module.default }).default;

/** `#/components/schemas/X` → `drums-openapi#/$defs/X`, everywhere in a schema. */
function rewriteRefs(s: unknown): unknown {
  if (Array.isArray(s)) return s.map(rewriteRefs);
  if (!s || typeof s !== 'object') return s;
  const out: Json = {};
  for (const [k, v] of Object.entries(s)) {
    out[k] =
      k === '$ref' && typeof v === 'string' && v.startsWith('#/components/schemas/')
        ? `${SPEC_ID}#/$defs/${v.slice('#/components/schemas/'.length)}`
        : rewriteRefs(v);
  }
  return out;
}

/** The JSON request-body schema of every operation that has one, by operationId. */
export function jsonBodySchemas(doc: Json): Record<string, Json> {
  const out: Record<string, Json> = {};
  for (const item of Object.values(doc.paths as Record<string, Json>)) {
    for (const op of Object.values(item)) {
      const schema = (op as Json)?.requestBody?.content?.['application/json']?.schema;
      if (schema) out[(op as Json).operationId as string] = schema;
    }
  }
  return out;
}

export interface BodyValidator {
  /** Throws ValidationError (400, the operation's code) if `body` is not what the spec allows. */
  check(operationId: string, body: unknown): void;
  /** The first violation as {field, code, message}, or undefined. */
  violation(operationId: string, body: unknown): { field: string; code: string; message: string } | undefined;
  readonly operations: string[];
}

/** Compiles the body schemas of an OpenAPI 3.1 document (each one on first use). */
export function createBodyValidator(doc: Json): BodyValidator {
  const ajv = new Ajv2020({
    allErrors: false,
    // Unknown keywords in the spec are an error; union types (`[string, 'null']`) are fine.
    strict: true,
    strictTypes: false,
    allowUnionTypes: true,
    // `format` is an annotation here (no request body uses one).
    validateFormats: false,
  });
  ajv.addSchema({ $id: SPEC_ID, $defs: rewriteRefs(doc.components?.schemas ?? {}) as Json });
  const schemas = jsonBodySchemas(doc);
  for (const op of Object.keys(schemas)) {
    if (!BODY_CODES[op]) throw new Error(`spec-validate: operation '${op}' takes a JSON body but has no error code in BODY_CODES`);
  }
  const compiled = new Map<string, ValidateFunction>();
  const validator = (op: string): ValidateFunction => {
    let v = compiled.get(op);
    if (!v) {
      const schema = schemas[op];
      if (!schema) throw new Error(`spec-validate: no JSON body schema for operation '${op}'`);
      v = ajv.compile(rewriteRefs(schema) as Json);
      compiled.set(op, v);
    }
    return v;
  };
  const violation = (op: string, body: unknown) => {
    const v = validator(op);
    if (v(body)) return undefined;
    const { field, message } = describe(v.errors ?? [], body);
    const rule = BODY_CODES[op]!;
    const code = rule.byField?.find(([p]) => field === p || field.startsWith(p + '.') || field.startsWith(p + '['))?.[1] ?? rule.code;
    return { field, code, message };
  };
  return {
    operations: Object.keys(schemas),
    violation,
    check(op, body) {
      const e = violation(op, body);
      if (e) throw new ValidationError(e.field, e.message, e.code);
    },
  };
}

/** `/actions/1/coordinate/0` → `actions[1].coordinate[0]` (brackets where the value is an array). */
function fieldPath(pointer: string, body: unknown, extra?: string): string {
  const segs = pointer
    ? pointer
        .slice(1)
        .split('/')
        .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    : [];
  if (extra !== undefined) segs.push(extra);
  let out = '';
  let cur: unknown = body;
  for (const s of segs) {
    out += Array.isArray(cur) ? `[${s}]` : out ? `.${s}` : s;
    cur = cur && typeof cur === 'object' ? (cur as Json)[s] : undefined;
  }
  return out || 'body';
}

const COMBINATORS = new Set(['anyOf', 'oneOf', 'allOf', 'not', 'if', 'propertyNames']);

/** The most specific error (deepest field; combinator summaries only if nothing else) as a field and a message. */
function describe(errors: ErrorObject[], body: unknown): { field: string; message: string } {
  const own = errors.filter((e) => !COMBINATORS.has(e.keyword));
  let best: { field: string; message: string; depth: number } | undefined;
  for (const e of own.length ? own : errors) {
    const p = e.params as Json;
    let extra: string | undefined;
    let message = e.message ?? 'is invalid';
    if (e.keyword === 'additionalProperties') {
      extra = String(p.additionalProperty);
      message = 'unknown field';
    } else if (e.keyword === 'required') {
      extra = String(p.missingProperty);
      message = 'is required';
    } else if (e.keyword === 'enum') message = `must be one of ${(p.allowedValues as unknown[]).map((x) => JSON.stringify(x)).join(', ')}`;
    else if (e.keyword === 'const') message = `must be ${JSON.stringify(p.allowedValue)}`;
    else if (e.keyword === 'anyOf' || e.keyword === 'oneOf') message = 'matches none of the allowed forms';
    // A property name that failed `propertyNames` (labels, env): name the key.
    if ((e as { propertyName?: string }).propertyName !== undefined) {
      extra = (e as { propertyName?: string }).propertyName;
      message = `key ${message}`;
    }
    const field = fieldPath(e.instancePath, body, extra);
    const depth = (e.instancePath.match(/\//g)?.length ?? 0) + (extra !== undefined ? 1 : 0);
    if (!best || depth > best.depth) best = { field, message, depth };
  }
  return { field: best?.field ?? 'body', message: `${best?.message ?? 'is invalid'} (per the API spec)` };
}

let shared: BodyValidator | undefined;

/** The validator of the daemon's own spec (src/protocol/generated/openapi.json). */
export function specBodies(): BodyValidator {
  shared ??= createBodyValidator(JSON.parse(readFileSync(new URL('../protocol/generated/openapi.json', import.meta.url), 'utf8')) as Json);
  return shared;
}

/** Route helper: the spec's check of a JSON body, after the route's own validation. */
export function checkBody(operationId: string, body: unknown): void {
  specBodies().check(operationId, body);
}

/** `/v1/sessions/{id}/exec` → a RegExp matching `/v1/sessions/s0123456789/exec`. */
function pathPattern(template: string): RegExp {
  return new RegExp(`^${template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+')}$`);
}

export interface ResponseValidator {
  /** Why `body` is not what the spec says `method path` answers with `status` (undefined = it is; also when the spec gives no JSON schema). */
  violation(method: string, path: string, status: number, body: unknown): string | undefined;
  /** Why `body` is not a `components.schemas[schemaName]` (undefined = it is). */
  violationOf(schemaName: string, body: unknown): string | undefined;
}

/**
 * Response bodies against the spec, for tests: the operation is found by method and path,
 * the response by status (else `default`), `$ref`s to components/responses are followed.
 */
export function createResponseValidator(doc: Json): ResponseValidator {
  const ajv = new Ajv2020({ allErrors: false, strict: true, strictTypes: false, allowUnionTypes: true, validateFormats: false });
  ajv.addSchema({ $id: SPEC_ID, $defs: rewriteRefs(doc.components?.schemas ?? {}) as Json });
  const paths = Object.entries(doc.paths as Record<string, Json>).map(([t, item]) => ({ re: pathPattern(t), template: t, item }));
  const compiled = new Map<string, ValidateFunction>();
  return {
    violation(method, path, status, body) {
      const p = paths.find((x) => x.re.test(path));
      const op = p?.item[method.toLowerCase()] as Json | undefined;
      // A path or method the spec does not have can only answer with the spec's error shape.
      if (!p || !op) return status >= 400 ? this.violationOf('ErrorResponse', body) : `the spec has no ${method} ${path}`;
      let res = (op.responses?.[String(status)] ?? op.responses?.default) as Json | undefined;
      if (!res) return `the spec lists no ${status} (and no default) response for ${method} ${p.template}`;
      if (typeof res.$ref === 'string') res = doc.components?.responses?.[res.$ref.split('/').pop()!] as Json;
      const schema = res?.content?.['application/json']?.schema;
      if (!schema) return undefined;
      const key = `${method} ${p.template} ${status}`;
      let v = compiled.get(key);
      if (!v) compiled.set(key, (v = ajv.compile(rewriteRefs(schema) as Json)));
      if (v(body)) return undefined;
      const e = v.errors?.[0];
      return `${key}: ${e?.instancePath || 'body'} ${e?.message ?? 'is invalid'} ${JSON.stringify(e?.params ?? {})}`;
    },
    violationOf(schemaName, body) {
      let v = compiled.get(`#${schemaName}`);
      if (!v) compiled.set(`#${schemaName}`, (v = ajv.compile({ $ref: `${SPEC_ID}#/$defs/${schemaName}` })));
      if (v(body)) return undefined;
      const e = v.errors?.[0];
      return `${schemaName}: ${e?.instancePath || 'body'} ${e?.message ?? 'is invalid'} ${JSON.stringify(e?.params ?? {})}`;
    },
  };
}

/** The response validator of the daemon's own spec. */
export function specResponses(): ResponseValidator {
  return createResponseValidator(JSON.parse(readFileSync(new URL('../protocol/generated/openapi.json', import.meta.url), 'utf8')) as Json);
}
