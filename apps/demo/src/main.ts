import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';
import { configFromEnv } from './demo.config.js';

const config = configFromEnv();
const app = await NestFactory.create(AppModule.forRoot(config), { logger: ['log', 'warn', 'error'] });
// The dashboard served by one instance calls the others' APIs (start, kill) directly.
app.enableCors();
// SIGTERM / SIGINT: held leases are released and waiter rows removed before the process exits.
app.enableShutdownHooks();
await app.listen(config.port, config.host);
new Logger('Demo').log(
  `Instance ${config.instance} (pid ${process.pid}): dashboard on http://${config.host}:${config.port}/`,
);
