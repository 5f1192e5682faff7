// What the builder tells apt and dpkg: the Debian mirrors (the config's, else the host's apt
// sources, else deb.debian.org), the sources, apt's and dpkg's settings for lean images.

import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { type DaemonConfig, loadConfig } from '../common/config.ts';

const DEFAULT_MIRROR = 'http://deb.debian.org/debian';
const DEFAULT_SECURITY_MIRROR = 'http://deb.debian.org/debian-security';

/** Debian mirrors for a build, from the config (DRUMS_DEBIAN_MIRROR, DRUMS_DEBIAN_SECURITY_MIRROR). */
export type MirrorConfig = Pick<DaemonConfig, 'debianMirror' | 'debianSecurityMirror'>;

interface AptEntry {
  uri: string;
  suites: string[];
}

function hostAptEntries(): AptEntry[] {
  const entries: AptEntry[] = [];
  const read = (f: string): string => {
    try {
      return readFileSync(f, 'utf8');
    } catch {
      return '';
    }
  };
  const oneLine = (text: string): void => {
    for (const raw of text.split('\n')) {
      const line = raw
        .replace(/#.*/, '')
        .replace(/\[[^\]]*\]/, ' ')
        .trim()
        .split(/\s+/);
      if (line[0] === 'deb' && line.length >= 3) entries.push({ uri: line[1], suites: [line[2]] });
    }
  };
  const deb822 = (text: string): void => {
    for (const para of text.split(/\n\s*\n/)) {
      const fields = new Map<string, string>();
      for (const l of para.split('\n')) {
        if (l.startsWith('#')) continue;
        const m = /^([A-Za-z-]+):\s*(.*)$/.exec(l);
        if (m) fields.set(m[1].toLowerCase(), m[2].trim());
      }
      if (fields.get('enabled') === 'no') continue;
      if (!(fields.get('types') ?? '').split(/\s+/).includes('deb')) continue;
      const suites = (fields.get('suites') ?? '').split(/\s+/).filter(Boolean);
      for (const uri of (fields.get('uris') ?? '').split(/\s+/).filter(Boolean)) entries.push({ uri, suites });
    }
  };
  oneLine(read('/etc/apt/sources.list'));
  let files: string[] = [];
  try {
    files = readdirSync('/etc/apt/sources.list.d').sort();
  } catch {
    /* none */
  }
  for (const f of files) {
    const text = read(join('/etc/apt/sources.list.d', f));
    if (f.endsWith('.sources')) deb822(text);
    else if (f.endsWith('.list')) oneLine(text);
  }
  return entries;
}

/**
 * Debian mirrors to build from: the config's DRUMS_DEBIAN_MIRROR (and
 * DRUMS_DEBIAN_SECURITY_MIRROR), else the host's apt sources if they point at
 * a Debian mirror, else deb.debian.org.
 */
export function debianMirrors(c: MirrorConfig = loadConfig(process.env)): { main: string; security: string } {
  const entries = hostAptEntries();
  const strip = (u: string): string => u.replace(/\/+$/, '');
  const hostMain = entries.find((e) => /^https?:\/\/.+\/debian\/?$/.test(e.uri) && e.suites.some((s) => !s.endsWith('-security')));
  const hostSec = entries.find((e) => /^https?:\/\/.+\/debian-security\/?$/.test(e.uri));
  return {
    main: strip(c.debianMirror || (hostMain ? hostMain.uri : DEFAULT_MIRROR)),
    security: strip(c.debianSecurityMirror || (hostSec ? hostSec.uri : DEFAULT_SECURITY_MIRROR)),
  };
}

export function aptSources(suite: string, mirrors: { main: string; security: string }): string {
  const keyring = '/usr/share/keyrings/debian-archive-keyring.gpg';
  if (['sid', 'unstable', 'experimental'].includes(suite)) {
    return `Types: deb\nURIs: ${mirrors.main}\nSuites: ${suite}\nComponents: main\nSigned-By: ${keyring}\n`;
  }
  return (
    `Types: deb\nURIs: ${mirrors.main}\nSuites: ${suite} ${suite}-updates\nComponents: main\nSigned-By: ${keyring}\n\n` +
    `Types: deb\nURIs: ${mirrors.security}\nSuites: ${suite}-security\nComponents: main\nSigned-By: ${keyring}\n`
  );
}

export const APT_CONF = `// Written by the drums image builder.
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Retries "3";
Acquire::Languages "none";
Dpkg::Use-Pty "0";
`;

export const DPKG_NODOC = `# Written by the drums image builder: keep images lean.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
`;

export const APT_GET = 'apt-get -q -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold';
