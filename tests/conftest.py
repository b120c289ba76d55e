import asyncio

import uvloop

# Every process of the project runs on uvloop; so do the tests.
asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
