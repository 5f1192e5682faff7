// Public surface of the a11y module: read a session's AT-SPI tree from the host, render it for OSWorld.

export { A11yClient, A11yCallError, resolveA11yBusSocket, socketPathFromAddress, DEFAULT_CALL_TIMEOUT_MS } from './client.ts';
export type { A11yCall, A11yConnectOptions, ResolveA11yBusOptions } from './client.ts';
export { A11yError } from './errors.ts';
export type { A11yErrorCode } from './errors.ts';
export { toOsworldXml, terminalText, tagForRole, pythonFloat, escapeAttribute, escapeText, osworldNamespace } from './osworld-xml.ts';
export type { OsworldXmlOptions, TerminalTextOptions } from './osworld-xml.ts';
export { DEFAULT_DEADLINE_MS, DEFAULT_MAX_IN_FLIGHT_PER_APP } from './walk.ts';
export type { A11yAction, A11yAppInfo, A11yExtents, A11yNode, A11yNodeError, A11yValue, WalkOptions, WalkResult, WalkStats } from './types.ts';
