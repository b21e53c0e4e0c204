import { Controller, Get, Header, Inject } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { LeaseMetrics } from 'nest-pg-lease/prometheus';
import { LeaseHealthIndicator } from 'nest-pg-lease/terminus';

/** Health (`@nestjs/terminus` with the library's lease indicator) and Prometheus metrics. */
@Controller()
export class OpsController {
  constructor(
    @Inject(HealthCheckService) private readonly health: HealthCheckService,
    @Inject(LeaseHealthIndicator) private readonly leaseHealth: LeaseHealthIndicator,
    @Inject(LeaseMetrics) private readonly metrics: LeaseMetrics,
  ) {}

  /** 200 when the lease tables answer and this instance's heartbeats are on time, else 503. */
  @Get('health')
  @HealthCheck()
  check() {
    return this.health.check([() => this.leaseHealth.isHealthy('leases')]);
  }

  @Get('metrics')
  @Header('Content-Type', 'text/plain; version=0.0.4; charset=utf-8')
  scrape(): Promise<string> {
    return this.metrics.registry.metrics();
  }
}
