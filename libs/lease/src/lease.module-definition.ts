import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { LeaseModuleOptions } from './interfaces/lease-module-options.interface.js';

export const {
  ConfigurableModuleClass: ConfigurableLeaseModule,
  MODULE_OPTIONS_TOKEN,
  OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<LeaseModuleOptions>({ moduleName: 'Lease' })
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createLeaseOptions')
  .build();
