import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig, type DefaultTheme } from 'vitepress';

const docs = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(docs, '..');

/** The pages, in the sidebar's order (docs/index.md lists the same). */
const sidebar: DefaultTheme.SidebarItem[] = [
  {
    text: 'Getting started',
    items: [
      { text: 'Overview', link: '/' },
      { text: 'Installation and compatibility', link: '/install' },
      { text: 'Guarantees — and their limits', link: '/guarantees' },
    ],
  },
  {
    text: 'Using it',
    items: [
      { text: '@Exclusive: doors and keys', link: '/exclusive' },
      { text: 'Busy policies', link: '/busy-policies' },
      { text: 'The LeaseService API', link: '/lease-service' },
      { text: 'Fencing and transactions', link: '/fencing' },
      { text: 'Waiting in line (priority)', link: '/waiting' },
      { text: 'Joining the running call', link: '/join' },
      { text: 'Preemption', link: '/preemption' },
      { text: 'Semaphores', link: '/semaphores' },
      { text: 'Read-write leases', link: '/read-write' },
      { text: 'Several keys at once', link: '/multi-key' },
      { text: 'Leader election', link: '/leader-election' },
      { text: 'Scheduled jobs and @Sticky', link: '/scheduled-jobs' },
      { text: 'Shutdown: the drain', link: '/shutdown' },
      { text: 'Errors and HTTP', link: '/errors-and-http' },
      { text: 'Recipes', link: '/recipes' },
      { text: 'Testing your code', link: '/testing' },
    ],
  },
  {
    text: 'Running it',
    items: [
      { text: 'Configuration', link: '/configuration' },
      { text: 'Observability', link: '/observability' },
      { text: "Operator's console", link: '/console' },
      { text: 'Bounds', link: '/bounds' },
      { text: 'Behind a connection pooler', link: '/poolers' },
      { text: 'Database privileges', link: '/privileges' },
      { text: 'Failover', link: '/failover' },
      { text: 'Cluster (Patroni)', link: '/cluster' },
      { text: 'Purging free rows', link: '/purging' },
    ],
  },
  {
    text: 'How it performs',
    items: [
      { text: 'Group commit and direct handoff', link: '/group-commit' },
      { text: 'Performance', link: '/performance' },
      { text: 'Scaling', link: '/scaling' },
    ],
  },
  {
    text: 'The project',
    items: [
      { text: 'The repository: layout, tests, demo', link: '/layout' },
      { text: 'Releasing', link: '/releasing' },
      { text: 'API reference', link: '/api/' },
    ],
  },
];

/** The API reference's own sidebar, written by TypeDoc (`typedoc-vitepress-theme`) before the site is built. */
function apiSidebar(): DefaultTheme.SidebarItem[] {
  const file = resolve(docs, 'api/typedoc-sidebar.json');
  if (!existsSync(file)) return [];
  return JSON.parse(readFileSync(file, 'utf8')) as DefaultTheme.SidebarItem[];
}

/**
 * A link from a page (all are in docs/ itself) that leaves docs/ for a file of the repository
 * (`../test/faults/README.md`, which VitePress hands over as `./../test/faults/README`) is no page of the site: it is
 * accepted when that file exists, and a dead link (the build fails) when it does not.
 */
function repositoryFileExists(url: string): boolean {
  const path = resolve(docs, url);
  if (!path.startsWith(`${repo}/`) || path.startsWith(`${docs}/`)) return false;
  return [path, `${path}.md`].some((candidate) => existsSync(candidate));
}

export default defineConfig({
  title: 'nest-pg-lease',
  description: 'Crash-safe heartbeat leases in PostgreSQL rows for NestJS',
  srcExclude: ['**/README.md'],
  cleanUrls: true,
  lastUpdated: false,
  ignoreDeadLinks: [repositoryFileExists],
  markdown: { lineNumbers: false },
  themeConfig: {
    outline: [2, 3],
    search: { provider: 'local' },
    nav: [
      { text: 'Guide', link: '/' },
      { text: 'API reference', link: '/api/' },
      { text: 'Changelog', link: '/changelog' },
    ],
    sidebar: { '/api/': [{ text: 'API reference', link: '/api/' }, ...apiSidebar()], '/': sidebar },
  },
});
