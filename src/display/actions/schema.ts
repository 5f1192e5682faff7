/**
 * The canonical computer-use action schema (docs/actions.md): the steps every vocabulary is
 * normalized into, their limits, and what running a batch answers. Types and constants only:
 * what changes here changes the contract, not the code that reads or runs actions (index.ts).
 */
import type { Region, ScreenshotFormat, ScreenshotResult } from '../screenshot.ts';

export type Button = 'left' | 'middle' | 'right' | 'back' | 'forward';
export interface Point {
  x: number;
  y: number;
}

export type CanonicalAction =
  | { type: 'move'; x: number; y: number }
  | { type: 'click'; x?: number; y?: number; button: Button; count: 1 | 2 | 3; modifiers?: string[] }
  | { type: 'mouse_down' | 'mouse_up'; button: Button; x?: number; y?: number }
  /** One point: drag from the current pointer position to it. */
  | { type: 'drag'; path: Point[]; button: Button }
  /** Wheel clicks: dy > 0 scrolls down, dx > 0 scrolls right. */
  | { type: 'scroll'; x?: number; y?: number; dx: number; dy: number; modifiers?: string[] }
  /** A chord: keys pressed in order, released in reverse. */
  | { type: 'key'; keys: string[] }
  | { type: 'key_down' | 'key_up'; key: string }
  | { type: 'type'; text: string }
  | { type: 'wait'; ms: number }
  | { type: 'screenshot'; format?: ScreenshotFormat; quality?: number; region?: Region; scale?: { width: number; height: number } }
  | { type: 'cursor_position' }
  /** Episode control from OSWorld (DONE / FAIL): nothing is executed. */
  | { type: 'done'; status: 'done' | 'fail' };

export type CanonicalType = CanonicalAction['type'];

export interface NormalizeOptions {
  screen: { width: number; height: number };
  /** Size of the (downscaled) screenshot the agent's coordinates refer to. */
  scale?: { width: number; height: number };
}

export const MAX_TEXT_LENGTH = 10_000;
export const MAX_WAIT_MS = 60_000;
export const MAX_SCROLL_CLICKS = 1_000;
/** OSWorld WAIT and argument-less waits. */
export const DEFAULT_WAIT_MS = 1_000;
export const BUTTONS: readonly Button[] = ['left', 'middle', 'right', 'back', 'forward'];
export const FORMATS: readonly ScreenshotFormat[] = ['png', 'jpeg', 'webp', 'raw'];

/** One canonical action of a batch, with the index of the input action it came from. */
export interface BatchStep {
  index: number;
  action: CanonicalAction;
}

export interface ActionResult {
  index: number;
  type: CanonicalType;
  ms: number;
  screenshot?: ScreenshotResult;
  cursor?: Point;
  status?: 'done' | 'fail';
}
