import { readFileSync } from 'node:fs';
import { Controller, Get, Header } from '@nestjs/common';
import { DASHBOARD_HTML } from './page.js';

/** The browser half, compiled by tsc next to this file. */
const CLIENT_JS = readFileSync(new URL('./client.js', import.meta.url), 'utf8');

/** The live dashboard: plain HTML and one small script that polls every instance's `/api/state`. */
@Controller()
export class DashboardController {
  @Get()
  @Header('Content-Type', 'text/html; charset=utf-8')
  page(): string {
    return DASHBOARD_HTML;
  }

  @Get('dashboard.js')
  @Header('Content-Type', 'text/javascript; charset=utf-8')
  script(): string {
    return CLIENT_JS;
  }
}
