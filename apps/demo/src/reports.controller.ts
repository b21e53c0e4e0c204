import {
  BadRequestException,
  Body,
  Controller,
  Get,
  HttpCode,
  Inject,
  NotFoundException,
  Param,
  ParseIntPipe,
  Post,
} from '@nestjs/common';
import { CurrentLease, Exclusive, type Lease } from 'nest-pg-lease';
import { DEMO_CONFIG, type DemoConfig } from './demo.config.js';
import type { JobResult } from './job-result.entity.js';
import { type ReportRequest, ReportsService } from './reports.service.js';

function optionalInteger(body: Record<string, unknown>, name: string, min: number, max: number): number | undefined {
  const value = body[name];
  if (value === undefined || value === null || value === '') return undefined;
  const number = Number(value);
  if (!Number.isInteger(number) || number < min || number > max) {
    throw new BadRequestException(`${name} must be an integer from ${min} to ${max}`);
  }
  return number;
}

function reportRequest(body: unknown): ReportRequest {
  const fields = body && typeof body === 'object' ? (body as Record<string, unknown>) : {};
  return { latencyMs: optionalInteger(fields, 'latencyMs', 0, 600_000) };
}

/** An admin request's priority (`defaultPriority` when absent) and its report request. */
function adminRequest(body: unknown, defaultPriority: number): { priority: number; request: ReportRequest } {
  const fields = body && typeof body === 'object' ? (body as Record<string, unknown>) : {};
  const priority = optionalInteger(fields, 'priority', -1_000_000, 1_000_000) ?? defaultPriority;
  return { priority, request: reportRequest(body) };
}

function view(result: JobResult) {
  return {
    userId: result.userId,
    fencingToken: result.fencingToken,
    score: result.score,
    instance: result.instance,
    priority: result.priority,
    savedAt: result.savedAt,
  };
}

/**
 * Four doors into the same lease per user: a decorated service method run in the background (202 / 409), a
 * decorated controller handler (synchronous), and `LeaseService.run` with a priority (admin, waits its turn) or
 * preempting (admin, urgent: takes the user over from a running report of lower priority).
 */
@Controller('api')
export class ReportsController {
  constructor(
    @Inject(ReportsService) private readonly reports: ReportsService,
    @Inject(DEMO_CONFIG) private readonly config: DemoConfig,
  ) {}

  /** 202 once the run holds the user's lease; 409 (from `LeaseExceptionFilter`) while another run holds it. */
  @Post('users/:id/report')
  @HttpCode(202)
  async start(@Param('id', ParseIntPipe) userId: number, @Body() body: unknown) {
    const lease = await this.reports.start(userId, reportRequest(body));
    return { status: 'started', userId, instance: this.config.instance, fencingToken: String(lease.fencingToken) };
  }

  /** The synchronous variant: the handler itself runs under the lease (the interceptor maps busy to 409). */
  @Post('users/:id/report/sync')
  @Exclusive('report:user:{id}')
  async buildNow(@Param('id', ParseIntPipe) userId: number, @Body() body: unknown, @CurrentLease() lease: Lease) {
    return view(await this.reports.produce(userId, lease, reportRequest(body)));
  }

  /** Admin: a high-priority report (default priority 10) that waits its turn in the user's line. */
  @Post('admin/users/:id/report')
  @HttpCode(202)
  enqueue(@Param('id', ParseIntPipe) userId: number, @Body() body: unknown) {
    const { priority, request } = adminRequest(body, 10);
    this.reports.enqueue(userId, priority, request);
    return { status: 'queued', userId, instance: this.config.instance, priority };
  }

  /** Admin: an urgent rebuild (default priority 100) that preempts a running report of lower priority. */
  @Post('admin/users/:id/report/urgent')
  @HttpCode(202)
  rebuildUrgently(@Param('id', ParseIntPipe) userId: number, @Body() body: unknown) {
    const { priority, request } = adminRequest(body, 100);
    this.reports.rebuildUrgently(userId, priority, request);
    return { status: 'preempting', userId, instance: this.config.instance, priority };
  }

  @Get('users/:id/report')
  async latest(@Param('id', ParseIntPipe) userId: number) {
    const history = await this.reports.history(userId);
    if (history.length === 0) throw new NotFoundException(`No report for user ${userId} yet`);
    return { userId, latest: view(history[0]), history: history.map(view) };
  }
}
