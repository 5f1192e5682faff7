// Minimal typings for the parts of npm `x11` 4.2.2 that src/display uses.
// The library is untyped CJS; keep this file in step with the pinned version.

declare module 'x11' {
  import type { EventEmitter } from 'node:events';
  import type { Duplex } from 'node:stream';

  /** Callback convention: return true to mark an X error as handled (else the client emits 'error'). */
  export type XCallback<T> = (err: XProtocolError | null | undefined, result: T) => unknown;

  export interface XProtocolError extends Error {
    error?: number;
    seq?: number;
    badParam?: number;
    majorOpcode?: number;
    minorOpcode?: number;
  }

  export interface XScreen {
    root: number;
    pixel_width: number;
    pixel_height: number;
    root_depth: number;
    root_visual: number;
    white_pixel: number;
    black_pixel: number;
  }

  export interface XDisplayInfo {
    screen: XScreen[];
    min_keycode: number;
    max_keycode: number;
    image_byte_order: number;
    max_request_length: number;
    vendor: string;
    release: number;
    client: XClient;
  }

  export interface XEvent {
    name: string;
    type: number;
    seq: number;
    wid?: number;
    atom?: number;
    state?: number;
    keycode?: number;
    rootx?: number;
    rooty?: number;
    x?: number;
    y?: number;
    request?: number;
    firstKeyCode?: number;
    count?: number;
    [k: string]: unknown;
  }

  export interface XPropertyReply {
    type: number;
    format: number;
    bytesAfter: number;
    data: Buffer;
  }
  export interface XGeometry {
    depth: number;
    windowid: number;
    xPos: number;
    yPos: number;
    width: number;
    height: number;
    borderWidth: number;
  }
  export interface XPointer {
    sameScreen: boolean;
    root: number;
    child: number;
    rootX: number;
    rootY: number;
    childX: number;
    childY: number;
    keyMask: number;
  }
  export interface XTranslate {
    sameScreen: boolean;
    child: number;
    destX: number;
    destY: number;
  }
  export interface XImage {
    depth: number;
    visualId: number;
    data: Buffer;
  }
  export interface XInputFocus {
    revertTo: number;
    focus: number;
  }

  export interface XClient extends EventEmitter {
    stream: Duplex & { _fdCapable?: boolean; destroy(): void };
    display: XDisplayInfo;
    atoms: Record<string, number>;
    eventMask: Record<string, number>;
    _closing: boolean;
    AllocID(): number;
    ReleaseID(id: number): void;
    require(name: string, cb: (err: Error | null | undefined, ext: any) => void): void;
    terminate(): void;
    GetInputFocus(cb: XCallback<XInputFocus>): void;
    InternAtom(onlyIfExists: boolean, name: string, cb: XCallback<number>): void;
    GetAtomName(atom: number, cb: XCallback<string>): void;
    GetProperty(del: number, wid: number, name: number, type: number, longOffset: number, longLength: number, cb: XCallback<XPropertyReply>): void;
    ChangeProperty(mode: number, wid: number, name: number, type: number, format: number, data: Buffer | string | number | number[]): void;
    GetGeometry(drawable: number, cb: XCallback<XGeometry>): void;
    QueryPointer(wid: number, cb: XCallback<XPointer>): void;
    TranslateCoordinates(src: number, dst: number, x: number, y: number, cb: XCallback<XTranslate>): void;
    GetImage(format: number, drawable: number, x: number, y: number, w: number, h: number, planeMask: number, cb: XCallback<XImage>): void;
    GetKeyboardMapping(first: number, count: number, cb: XCallback<number[][]>): void;
    ChangeKeyboardMapping(first: number, perKeycode: number, keysyms: number[]): void;
    GetModifierMapping(cb: XCallback<number[][]>): void;
    ChangeWindowAttributes(wid: number, values: Record<string, number>): void;
    CreateWindow(
      wid: number,
      parent: number,
      x: number,
      y: number,
      w: number,
      h: number,
      border?: number,
      depth?: number,
      klass?: number,
      visual?: number,
      values?: Record<string, number>,
    ): void;
    DestroyWindow(wid: number): void;
    MapWindow(wid: number): void;
    SendClientMessage(destination: number, wid: number, messageType: number, format: number, data: number[], eventMask?: number, cb?: XCallback<void>): void;
    [k: string]: any;
  }

  export interface CreateClientOptions {
    display?: string;
    stream?: Duplex;
    shm?: boolean | 'off' | object;
    auth?: { name: string; data: string };
    disableBigRequests?: boolean;
  }

  export interface KeySymEntry {
    code: number;
    description: string | null;
  }

  interface X11Module {
    createClient(options: CreateClientOptions, cb: (err: Error | null | undefined, display: XDisplayInfo) => void): XClient;
    eventMask: Record<string, number>;
    keySyms: Record<string, KeySymEntry>;
  }
  const x11: X11Module;
  export default x11;
}
