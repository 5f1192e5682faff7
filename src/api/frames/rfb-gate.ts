/**
 * The VNC viewer → server direction of RFB (RFC 6143), read message by message so a viewer's
 * input reaches the session only while the viewer holds the session's take-over.
 *
 * x11vnc is one server shared by every viewer of a session, so it cannot tell viewers apart;
 * the daemon sits between each viewer and it and parses what the viewer sends:
 * - the handshake (ProtocolVersion, the security type, ClientInit) and the messages that only
 *   ask for pixels (SetPixelFormat, SetEncodings, FramebufferUpdateRequest,
 *   EnableContinuousUpdates) always pass;
 * - input (KeyEvent, PointerEvent, ClientCutText, QEMU extended key events) and messages that
 *   change the session (SetDesktopSize, xvp) pass only while `allowInput()` says so, and are
 *   dropped otherwise: the viewer is view-only;
 * - anything else (an unknown type, a security type other than None, which is all x11vnc
 *   offers here, or an oversized clipboard) ends the connection: what cannot be parsed cannot
 *   be gated.
 */

/** Clipboard text accepted from a viewer in one message. */
export const MAX_CUT_TEXT = 1024 * 1024;

export class RfbGateError extends Error {}

type Phase = 'version' | 'security' | 'init' | 'messages';

export class RfbInputGate {
  private _buf: Buffer = Buffer.alloc(0);
  private _phase: Phase = 'version';
  /** Input messages dropped because the viewer did not hold the take-over. */
  dropped = 0;
  private readonly _allowInput: () => boolean;

  constructor(allowInput: () => boolean) {
    this._allowInput = allowInput;
  }

  /** Takes viewer bytes; returns the bytes to forward to the server (throws RfbGateError to close). */
  feed(chunk: Buffer): Buffer {
    this._buf = this._buf.length ? Buffer.concat([this._buf, chunk]) : chunk;
    const out: Buffer[] = [];
    for (;;) {
      const n = this._next();
      if (n === null) break;
      const msg = this._buf.subarray(0, n.length);
      this._buf = this._buf.subarray(n.length);
      if (!n.input) out.push(msg);
      else if (this._allowInput()) out.push(msg);
      else this.dropped++;
    }
    return out.length === 1 ? out[0]! : Buffer.concat(out);
  }

  /** The length of the next whole message in the buffer and whether it is input, or null. */
  private _next(): { length: number; input: boolean } | null {
    const b = this._buf;
    switch (this._phase) {
      case 'version': {
        if (b.length < 12) return null;
        const m = /^RFB 003\.(\d{3})\n$/.exec(b.toString('latin1', 0, 12));
        if (!m) throw new RfbGateError('not an RFB protocol version');
        // 3.3: the server picks the security type and the client sends nothing for it.
        this._phase = Number(m[1]) >= 7 ? 'security' : 'init';
        return { length: 12, input: false };
      }
      case 'security':
        if (b.length < 1) return null;
        if (b[0] !== 1) throw new RfbGateError(`security type ${b[0]} (only None is served)`);
        this._phase = 'init';
        return { length: 1, input: false };
      case 'init':
        if (b.length < 1) return null;
        this._phase = 'messages';
        return { length: 1, input: false };
      case 'messages':
        return b.length ? message(b) : null;
    }
  }
}

/** One client-to-server message: its length once enough bytes are there, else null. */
function message(b: Buffer): { length: number; input: boolean } | null {
  const need = (n: number, input: boolean) => (b.length >= n ? { length: n, input } : null);
  switch (b[0]) {
    case 0: // SetPixelFormat
      return need(20, false);
    case 2: // SetEncodings: u16 count of s32
      return b.length < 4 ? null : need(4 + 4 * b.readUInt16BE(2), false);
    case 3: // FramebufferUpdateRequest
      return need(10, false);
    case 4: // KeyEvent
      return need(8, true);
    case 5: // PointerEvent
      return need(6, true);
    case 6: {
      // ClientCutText: u32 length of text
      if (b.length < 8) return null;
      const len = b.readUInt32BE(4);
      if (len > MAX_CUT_TEXT) throw new RfbGateError(`clipboard text of ${len} bytes (at most ${MAX_CUT_TEXT})`);
      return need(8 + len, true);
    }
    case 150: // EnableContinuousUpdates
      return need(10, false);
    case 250: // xvp (shutdown/reboot requests)
      return need(4, true);
    case 251: // SetDesktopSize: u8 count of 16-byte screens at offset 6
      return b.length < 8 ? null : need(8 + 16 * b[6]!, true);
    case 255: // QEMU: subtype 0 is the extended key event
      if (b.length < 2) return null;
      if (b[1] !== 0) throw new RfbGateError(`QEMU message subtype ${b[1]}`);
      return need(12, true);
    default:
      throw new RfbGateError(`client message type ${b[0]}`);
  }
}
