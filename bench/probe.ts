/** One probe of `drums audit`: an attack tried, and whether the fence held ('pass') or not ('fail'). */
export interface Probe {
  arm: string;
  id: string;
  category: string;
  /** Who attacked: 'user' (the desktop user in a session), 'root' (root-in-session), 'host' (the audit itself), 'host-uid' (a host uid other than root). */
  as: string;
  result: 'pass' | 'fail' | 'invalid';
  detail: string;
}
