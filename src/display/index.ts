/** Display layer: one persistent X connection per session (screenshots, input, windows). */
export { XDisplay, DEFAULT_TIMEOUT_MS } from './x-display.ts';
export type { XDisplayOpenOptions } from './x-display.ts';
export { DisplayError, isDisplayError } from './errors.ts';
export type { DisplayErrorCode } from './errors.ts';
export type { ScreenshotOptions, ScreenshotResult, ScreenshotFormat, Region } from './screenshot.ts';
export type { MouseButton, ClickOptions, DragOptions, ScrollOptions } from './input.ts';
export { XConnection } from './x-connection.ts';
export type { WindowInfo, WaitForWindowOptions } from './windows.ts';
export { normalizeAction, normalizeActions, runActions, runAction } from './actions/index.ts';
export type { CanonicalAction, NormalizeOptions, ActionResult } from './actions/index.ts';
export { keysymFromName } from './keysyms.ts';
