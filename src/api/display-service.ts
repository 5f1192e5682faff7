import { DrumsError } from '../common/errors.ts';
import type { Session } from '../session/manager.ts';
import { XDisplay } from '../display/x-display.ts';
import type { ScreenshotOptions, ScreenshotResult } from '../display/screenshot.ts';

/**
 * One persistent X connection per session generation, opened on first use
 * through the session's host-side socket path and dropped on reset/destroy.
 */
export class DisplayService {
  private readonly _conns = new Map<string, { generation: number; display: Promise<XDisplay> }>();

  async connection(s: Session): Promise<XDisplay> {
    const cur = this._conns.get(s.id);
    if (cur && cur.generation === s.generation) return cur.display;
    this.drop(s.id);
    const display = XDisplay.open(s.x11Socket, { timeoutMs: 5000 });
    this._conns.set(s.id, { generation: s.generation, display });
    display.then((d) => d.once('closed', () => {
      if (this._conns.get(s.id)?.display === display) this._conns.delete(s.id);
    }), () => this._conns.delete(s.id));
    try {
      return await display;
    } catch (e) {
      throw new DrumsError('display_unavailable', `cannot connect to the X server of session ${s.id}: ${(e as Error).message}`, { cause: e });
    }
  }

  async screenshot(s: Session, opts: ScreenshotOptions): Promise<ScreenshotResult> {
    const d = await this.connection(s);
    return d.screenshot(opts);
  }

  drop(id: string): void {
    const cur = this._conns.get(id);
    this._conns.delete(id);
    cur?.display.then((d) => d.close(), () => {});
  }

  closeAll(): void {
    for (const id of [...this._conns.keys()]) this.drop(id);
  }
}
